"""Cross-target assembly of the kernels' register-tile micro-kernels: each tile's LLVM IR
compiled with llvmlite for several LLVM CPU targets (none of which need be this host's),
through LLVM's O3 pipeline and code generator with loop strength reduction off (as
``kernels._link`` emits jitort's code), and its inner loop checked in the assembly: vector
width, no stack traffic, one FMA (``vpdpbusd``) per accumulator and step.

Why: under Intel targets' scheduling models (``skylake-avx512``, ``rocketlake``) the float32
6x64 tile once kept 4 of its 24 zmm accumulators in registers and moved the other 20 through
the stack at every step, while the host's own tuning (``znver4``) was fine: a tests-pass,
runs-slow regression invisible on the machine that wrote the code. The tiles are now built
in functions of their own (``ptr.outlined``) over strength-reduced loops (``ptr.tile_loop``);
these tests keep them that way for every target, whatever CPU runs the suite, and
``test_sgemm_tile_inlined_in_rows_spills`` reproduces the bug (the tile inlined into a
``_rows``-like caller) to show that they would see it.

Tiles covered: ``sgemm.tile_function`` (AVX-512: 16 lanes x 4 vectors; AVX2: 8 x 2), the
float implicit-convolution tile (``conv_implicit.ftile_off_function``) and the integer tiles
(``qgemm.tile_function`` / ``tile_off_function``), both AVX-512 only: the functions the
kernels' intrinsics call, built here for each target. The integer tile uses
``vpdpbusd`` on VNNI targets and the portable widened-product form elsewhere (``qgemm.
_dpbusd`` reads ``qgemm.HAS_VNNI``, set per target here).
"""
import re
from collections import Counter

import llvmlite.binding as ll
import pytest
from llvmlite import ir

from jitort.kernels.cpu import conv_implicit, qgemm, sgemm

#: LLVM CPU names, by the widest vector registers their feature sets (derived by LLVM from
#: the name alone: features="") give; VNNI: AVX512-VNNI among them
AVX512 = ("skylake-avx512", "icelake-server", "rocketlake", "sapphirerapids", "znver4")
AVX2 = ("haswell", "znver3")
VNNI = ("icelake-server", "rocketlake", "sapphirerapids", "znver4")
assert AVX512 and AVX2 and set(VNNI) <= set(AVX512)  # parametrizations below never empty

TRIPLE = ll.get_process_triple()
if not TRIPLE.startswith("x86_64"):  # the targets are x86's whatever runs the tests
    TRIPLE = "x86_64-unknown-linux-gnu"

ll.initialize_all_targets()
ll.initialize_all_asmprinters()

I64 = ir.IntType(64)
F32 = ir.FloatType()


def _shape(cpu):
    """(vector width in float32 lanes, vectors per tile row, register class) of sgemm's tile
    for cpu."""
    return (16, 4, "zmm") if cpu in AVX512 else (8, 2, "ymm")


# --- compiling ------------------------------------------------------------------------------

def compile_asm(module, cpu: str) -> str:
    """x86-64 assembly of ``module`` (an ``ir.Module`` or its text) for LLVM CPU ``cpu``:
    parsed, verified, LLVM's O3 module pipeline for that target machine (loop vectorizer on,
    SLP off, as Numba runs it), then its code generator, with ``-disable-lsr`` on for both
    (restored after), as ``kernels._link`` emits jitort's code. Features come from the CPU
    name (features=""): an unknown name would leave plain x86-64 (no ymm / zmm: the width
    checks fail), a VNNI target without VNNI would stop LLVM at instruction selection."""
    tm = ll.Target.from_triple(TRIPLE).create_target_machine(
        cpu=cpu, features="", opt=3, reloc="default", codemodel="jitdefault")
    mod = ll.parse_assembly(str(module))
    mod.triple = TRIPLE
    mod.data_layout = str(tm.target_data)
    mod.verify()
    ll.set_option("jitort", "-disable-lsr=true")
    try:
        pto = ll.create_pipeline_tuning_options(speed_level=3)
        pto.loop_vectorization, pto.slp_vectorization = True, False  # Numba's defaults
        pb = ll.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
        return tm.emit_assembly(mod)
    finally:
        ll.set_option("jitort", "-disable-lsr=false")


def _export(module, fn):
    """An external function of ``module`` calling ``fn`` (internal, never inlined, as the
    kernels' intrinsics call it) with its own arguments: keeps fn alive through the
    pipeline."""
    wrap = ir.Function(module, fn.function_type, f"call.{fn.name}")
    b = ir.IRBuilder(wrap.append_basic_block("entry"))
    b.call(fn, wrap.args)
    b.ret_void()
    return module


# --- the tiles ------------------------------------------------------------------------------

def sgemm_module(vw, nv, mr=sgemm.MR):
    module = ir.Module("sgemm_tile")
    return _export(module, sgemm.tile_function(module, vw=vw, nv=nv, mr=mr))


def ftile_off_module():
    """``conv_implicit._ftile_off``'s function: 6 x 64 float32 accumulators from the bias,
    a weight broadcast per row and step, 4 vectors at a per-step offset from a table."""
    module = ir.Module("ftile_off")
    return _export(module, conv_implicit.ftile_off_function(module))


def qtile_module(off, p_is_u8=False):
    """``qgemm._tile`` (packed V, ``off`` False) or ``qgemm._tile_off``'s function (V read
    at a per-step byte offset from a table): 6 x 64 int32 accumulators, ``qgemm._dpbusd``
    steps (``vpdpbusd`` where ``qgemm.HAS_VNNI``, else its portable form)."""
    module = ir.Module("qtile")
    fn = qgemm.tile_off_function(module) if off else qgemm.tile_function(module, p_is_u8)
    return _export(module, fn)


# --- a caller of the tile -----------------------------------------------------------------

def _counted(b, n, body, name):
    """``for j in range(n): body(j)`` (i64 n; no steps when n <= 0)."""
    pre, fn = b.block, b.function
    loop, done = fn.append_basic_block(f"{name}.loop"), fn.append_basic_block(f"{name}.done")
    b.cbranch(b.icmp_signed(">", n, ir.Constant(I64, 0)), loop, done)
    b.position_at_end(loop)
    j = b.phi(I64)
    j.add_incoming(ir.Constant(I64, 0), pre)
    body(j)
    jn = b.add(j, ir.Constant(I64, 1))
    j.add_incoming(jn, b.block)
    b.cbranch(b.icmp_signed("<", jn, n), loop, done)
    b.position_at_end(done)


def rows_module(vw, nv, inline):
    """``sgemm._rows``'s shape around ``sgemm.tile_function``: a loop over tiles of MR rows,
    each the tile's call and then its rows added into C (``c += al * tl``, ``c = al * tl``
    or ``c = be * c + al * tl``: loops LLVM vectorizes, the broadcasts of al and be hoisted
    out of the loop over tiles, so live across the tile's call). ``inline``: the tile
    function made ``alwaysinline`` instead of ``noinline`` -- the micro-kernel inlined into
    its caller, as it was before ``ptr.outlined`` (same tile IR otherwise)."""
    mr_, nr = sgemm.MR, vw * nv
    module = ir.Module("rows")
    vp, fp = ir.VectorType(F32, vw).as_pointer(), F32.as_pointer()
    tile = sgemm.tile_function(module, vw=vw, nv=nv)
    if inline:
        tile.attributes.remove("noinline")
        tile.attributes.add("alwaysinline")
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [
        fp, fp, I64, I64, fp, fp, I64, fp, I64, I64, I64, F32, F32, ir.IntType(1)]), "rows")
    tl, a, ars, aks, bp, bp2, kc, c, ldc, m, ncol, al, be, first = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    fm = ("reassoc", "contract", "arcp")  # sgemm's fastmath
    nvec = b.sdiv(b.add(ncol, ir.Constant(I64, vw - 1)), ir.Constant(I64, vw))
    ntiles = b.sdiv(b.add(m, ir.Constant(I64, mr_ - 1)), ir.Constant(I64, mr_))

    def c_at(d, j):
        return b.gep(c, [b.add(d, j)])

    def one_tile(t):
        i0 = b.mul(t, ir.Constant(I64, mr_))
        left = b.sub(m, i0)
        mr = b.select(b.icmp_signed("<", left, ir.Constant(I64, mr_)), left,
                      ir.Constant(I64, mr_))
        sel = b.add(b.mul(mr, ir.Constant(I64, 8 * nv)), nvec)
        b.call(tile, [b.bitcast(tl, vp), b.gep(a, [b.mul(i0, ars)]), ars, aks,
                      b.bitcast(bp, vp), b.bitcast(bp2, vp), kc, sel])

        def row(r):
            d = b.mul(b.add(i0, r), ldc)
            s = b.mul(r, ir.Constant(I64, nr))

            def scaled(j):
                return b.fmul(al, b.load(b.gep(tl, [b.add(s, j)])), flags=fm)
            acc = b.or_(b.not_(first), b.fcmp_ordered("==", be, ir.Constant(F32, 1.0)))
            with b.if_else(acc) as (then, other):
                with then:
                    _counted(b, ncol, lambda j: b.store(
                        b.fadd(b.load(c_at(d, j)), scaled(j), flags=fm), c_at(d, j)), "add")
                with other:
                    with b.if_else(b.fcmp_ordered("==", be, ir.Constant(F32, 0.0))) as (z, nz):
                        with z:
                            _counted(b, ncol, lambda j: b.store(scaled(j), c_at(d, j)), "set")
                        with nz:
                            _counted(b, ncol, lambda j: b.store(
                                b.fadd(b.fmul(be, b.load(c_at(d, j)), flags=fm), scaled(j),
                                       flags=fm), c_at(d, j)), "scale")
        _counted(b, mr, row, "row")
    _counted(b, ntiles, one_tile, "tile")
    b.ret_void()
    return module


# --- reading the assembly -------------------------------------------------------------------

_LABEL = re.compile(r"^([.\w$]+):")
_JUMP = re.compile(r"^j[a-z]+\s+([.\w$]+)\s*$")
_VREG = re.compile(r"%([xyz]mm)\d+")


def loops(asm: str) -> list:
    """The loops of ``asm`` that are one block each: for every label L with a jump back to L
    before the next label, the instructions from L to that jump (comments kept: the code
    generator marks spill code ``# 64-byte Spill`` / ``Reload``), with ``frame``: whether the
    function addresses its frame through %rbp (else %rbp is an ordinary register)."""
    found, label, body, frame = [], None, [], False
    for line in asm.splitlines():
        m = _LABEL.match(line)
        if m:
            if not m.group(1).startswith(".L"):  # a function's entry
                frame = False
            label, body = m.group(1), []
            continue
        ins = line.strip()
        if not ins or ins.startswith(("#", ".")):
            continue
        body.append(ins)
        code = ins.split("#")[0].strip()
        if re.match(r"movq\s+%rsp,\s*%rbp$", code):
            frame = True
        j = _JUMP.match(code)
        if j and label is not None and j.group(1) == label:
            found.append({"label": label, "body": list(body), "frame": frame})
    return found


def spills(loop) -> list:
    """The instructions of ``loop`` that touch the stack."""
    base = r"\(%rsp[,)]|\(%rbp[,)]" if loop["frame"] else r"\(%rsp[,)]"
    return [ins for ins in loop["body"]
            if re.search(base, ins.split("#")[0]) or re.search(r"Spill|Reload", ins)]


def _mnemonic(ins):
    """An instruction's mnemonic, past any ``{vex}`` / ``{evex}`` encoding prefix."""
    return next(t for t in ins.split() if not t.startswith("{"))


def ops(loop, mnemonic) -> list:
    """Instructions of ``loop`` whose mnemonic starts with ``mnemonic``."""
    return [ins for ins in loop["body"] if _mnemonic(ins).startswith(mnemonic)]


def _dest(ins):
    """The destination (last) register operand of an AT&T instruction."""
    return ins.split("#")[0].split(",")[-1].strip()


def main_loop(asm, mnemonic):
    """The loop with the most distinct accumulators (destinations of ``mnemonic``): the full
    tile's. Smaller edge tiles may have as many ``mnemonic`` instructions once LLVM unrolls
    them, never as many accumulators."""
    cands = [lp for lp in loops(asm) if ops(lp, mnemonic)]
    assert cands, f"no loop with {mnemonic} in the assembly"
    return max(cands, key=lambda lp: (len({_dest(i) for i in ops(lp, mnemonic)}),
                                      len(ops(lp, mnemonic))))


def check_tile(asm, mnemonic, accs, reg):
    """The full tile's loop: ``accs`` accumulators, each updated the same number of times per
    pass (one per step, several if LLVM unrolled it), every ``mnemonic`` on ``reg``
    registers, nothing through the stack. Returns the loop."""
    lp = main_loop(asm, mnemonic)
    fmas = ops(lp, mnemonic)
    text = "\n".join(lp["body"])
    per_acc = Counter(_dest(i) for i in fmas)
    assert len(per_acc) == accs, text
    assert fmas and len(fmas) % accs == 0, text
    assert set(per_acc.values()) == {len(fmas) // accs}, (per_acc, text)
    widths = {w for i in fmas for w in _VREG.findall(i.split("#")[0])}
    assert widths == {reg}, (widths, text)
    assert not spills(lp), "\n".join(spills(lp))
    return lp


def _no_spills_anywhere(asm):
    """No loop of the module (every edge tile's too) touches the stack."""
    bad = {lp["label"]: spills(lp) for lp in loops(asm) if spills(lp)}
    assert not bad, bad


# --- the tests ------------------------------------------------------------------------------

@pytest.mark.parametrize("cpu", AVX512 + AVX2)
def test_sgemm_tile(cpu):
    vw, nv, reg = _shape(cpu)
    asm = compile_asm(sgemm_module(vw, nv), cpu)
    check_tile(asm, "vfmadd", sgemm.MR * nv, reg)
    _no_spills_anywhere(asm)


@pytest.mark.parametrize("cpu", AVX512)
def test_conv_implicit_ftile(cpu):
    asm = compile_asm(ftile_off_module(), cpu)
    check_tile(asm, "vfmadd", qgemm.MR * qgemm.NV, "zmm")
    _no_spills_anywhere(asm)


@pytest.mark.parametrize("cpu", VNNI)
@pytest.mark.parametrize("off,p_is_u8", [(False, False), (False, True), (True, False)],
                         ids=["tile-v_u8", "tile-p_u8", "tile_off"])
def test_qgemm_tile_vnni(cpu, off, p_is_u8, monkeypatch):
    monkeypatch.setattr(qgemm, "HAS_VNNI", True)
    asm = compile_asm(qtile_module(off, p_is_u8), cpu)
    check_tile(asm, "vpdpbusd", qgemm.MR * qgemm.NV, "zmm")
    _no_spills_anywhere(asm)


NO_VNNI = tuple(t for t in AVX512 if t not in VNNI)
assert NO_VNNI


def _portable_qtile_loop(cpu, monkeypatch):
    """The integer tile's loop in its portable form (no VNNI: ``vpdpbusd`` as widened
    products, which LLVM turns into ``vpmaddwd`` + ``vpaddd``)."""
    monkeypatch.setattr(qgemm, "HAS_VNNI", False)
    return main_loop(compile_asm(qtile_module(False), cpu), "vpmaddwd")


@pytest.mark.parametrize("cpu", NO_VNNI)
def test_qgemm_tile_portable_width(cpu, monkeypatch):
    lp = _portable_qtile_loop(cpu, monkeypatch)
    arith = ops(lp, "vpmaddwd") + ops(lp, "vpaddd")
    assert arith and {w for i in arith for w in _VREG.findall(i.split("#")[0])} == {"zmm"}


@pytest.mark.xfail(strict=True, reason=(
    "the portable form needs 4 zmm of widened products per vpdpbusd and spills ~40 zmm "
    "per step under every target (znver4's too); production never runs it: the int8 "
    "lowerings take this path only where qgemm.HAS_VNNI"))
@pytest.mark.parametrize("cpu", NO_VNNI)
def test_qgemm_tile_portable_no_spills(cpu, monkeypatch):
    lp = _portable_qtile_loop(cpu, monkeypatch)
    assert not spills(lp), "\n".join(spills(lp))


@pytest.mark.parametrize("cpu", AVX512 + AVX2)
def test_sgemm_tile_in_rows(cpu):
    """The tile called from a ``_rows``-like caller (``rows_module``), as production builds
    it: still clean."""
    vw, nv, reg = _shape(cpu)
    asm = compile_asm(rows_module(vw, nv, inline=False), cpu)
    check_tile(asm, "vfmadd", sgemm.MR * nv, reg)
    bad = [lp for lp in loops(asm) if ops(lp, "vfmadd") and spills(lp)]
    assert not bad, bad


@pytest.mark.parametrize("cpu", ("skylake-avx512", "rocketlake", "icelake-server"))
def test_sgemm_tile_inlined_in_rows_spills(cpu):
    """The bug ``ptr.outlined`` fixed, reproduced (and the checks above shown to see it):
    the same tile inlined into the ``_rows``-like caller, whose broadcasts of alpha and beta
    stay live across it, keeps 4 of its 24 zmm accumulators in registers under Intel
    targets' tuning and moves the rest through the stack at every step (~50 stack accesses
    per step; the production assembly of the pre-fix ``sgemm._rows`` had the same loop).
    ``znver4`` spills only a few values there (4-5 accesses per unrolled pair of steps), so
    its timings hid it."""
    asm = compile_asm(rows_module(16, 4, inline=True), cpu)
    accs = sgemm.MR * 4
    tiles = [lp for lp in loops(asm) if len(ops(lp, "vfmadd")) >= accs]
    worst = max(tiles, key=lambda lp: len(spills(lp)))
    assert len(spills(worst)) >= 20, "\n".join(worst["body"])
    assert len({_dest(i) for i in ops(worst, "vfmadd")}) < accs
    with pytest.raises(AssertionError):
        check_tile(asm, "vfmadd", accs, "zmm")


@pytest.mark.parametrize("cpu", ("skylake-avx512", "znver4", "haswell", "znver3"))
def test_checker_sees_spills(cpu):
    """The checks catch a tile too big for the register file: 8 rows (32 zmm accumulators,
    or 16 ymm, plus the operands) cannot all stay in registers on any target."""
    vw, nv, reg = _shape(cpu)
    asm = compile_asm(sgemm_module(vw, nv, mr=8), cpu)
    assert any(spills(lp) for lp in loops(asm) if ops(lp, "vfmadd"))
    with pytest.raises(AssertionError):
        check_tile(asm, "vfmadd", 8 * nv, reg)
    with pytest.raises(AssertionError):
        _no_spills_anywhere(asm)


def test_checker_reads_asm():
    """``loops`` / ``spills`` on a hand-written listing: a self-loop found, its stack traffic
    flagged (by address or by the code generator's Spill / Reload comments), %rbp as an
    ordinary base register not flagged when the function has no frame pointer."""
    asm = """f:
\tpushq\t%rbx
.LBB0_1:                # =>This Inner Loop Header: Depth=1
\tvbroadcastss\t(%rbp,%rdx,4), %zmm28
\tvfmadd231ps\t%zmm24, %zmm28, %zmm0
\tvfmadd231ps\t-64(%rsp), %zmm28, %zmm1    # 64-byte Folded Reload
\tvmovups\t%zmm1, 64(%rsp)              # 64-byte Spill
\tjne\t.LBB0_1
# %bb.2:
\tretq
g:
\tmovq\t%rsp, %rbp
.LBB1_3:
\tvmovups\t%zmm2, -128(%rbp)
\tvfmadd231ps\t%zmm24, %zmm28, %zmm0
\tjl\t.LBB1_3
"""
    found = loops(asm)
    assert [lp["label"] for lp in found] == [".LBB0_1", ".LBB1_3"]
    assert len(ops(found[0], "vfmadd")) == 2 and _dest(ops(found[0], "vfmadd")[0]) == "%zmm0"
    assert len(spills(found[0])) == 2       # not the broadcast through %rbp
    assert len(spills(found[1])) == 1       # %rbp is g's frame pointer
