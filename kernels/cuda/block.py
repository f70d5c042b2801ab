"""Block-wide reductions through shared memory (no warp shuffles: the simulator lacks them)."""
from numba import cuda

#: Threads per block of the row-reduction kernels (a power of two).
BLOCK = 64

SUM, MAX, MIN, PROD = 0, 1, 2, 3


@cuda.jit(device=True)
def combine(a, b, op):
    if op == SUM:
        return a + b
    if op == MAX:  # NaN-propagating, like np.maximum
        return a if (a >= b or a != a) else b
    if op == MIN:
        return a if (a <= b or a != a) else b
    return a * b


@cuda.jit(device=True)
def reduce(buf, v, op):
    """Combine ``v`` over the block's ``BLOCK`` threads; every thread gets the result."""
    t = cuda.threadIdx.x
    buf[t] = v
    cuda.syncthreads()
    s = BLOCK // 2
    while s > 0:
        if t < s:
            buf[t] = combine(buf[t], buf[t + s], op)
        cuda.syncthreads()
        s //= 2
    r = buf[0]
    cuda.syncthreads()  # buf is reused by the next reduction
    return r


@cuda.jit(device=True)
def row_base(inner, n):
    """Element offset of the row this block reduces: block o of an (outer, n, inner) view is row
    (o // inner, :, o % inner), its elements ``inner`` apart."""
    o = cuda.blockIdx.x
    return (o // inner) * n * inner + o % inner
