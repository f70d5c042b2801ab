/* Heap high-water mark for benchmarks: LD_PRELOAD this library and every malloc / calloc /
 * realloc / free / posix_memalign / aligned_alloc / memalign in the process is counted by its
 * usable size. Python reads and resets the counters through ctypes:
 *
 *     long mp_current(void)   bytes live now
 *     long mp_peak(void)      most bytes live since the last mp_reset()
 *     void mp_reset(void)     peak := current
 *
 * Built on the fly by scripts/bench_dynamic.py (gcc -shared -fPIC -O2 -o libmp.so malloc_peak.c
 * -ldl). Allocations that bypass malloc (direct mmap) are not seen; numpy, Numba's NRT and
 * onnxruntime's CPU allocator all go through malloc.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stddef.h>
#include <string.h>

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void (*real_free)(void *);
static int (*real_posix_memalign)(void **, size_t, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);
static void *(*real_memalign)(size_t, size_t);

static long cur_bytes, peak_bytes;
static int resolving;
/* dlsym may call calloc before real_calloc is known: serve it from a static buffer. */
static char boot_buf[4096];
static size_t boot_used;

static void resolve(void)
{
    if (real_malloc || resolving)
        return;
    resolving = 1;
    real_malloc = dlsym(RTLD_NEXT, "malloc");
    real_calloc = dlsym(RTLD_NEXT, "calloc");
    real_realloc = dlsym(RTLD_NEXT, "realloc");
    real_free = dlsym(RTLD_NEXT, "free");
    real_posix_memalign = dlsym(RTLD_NEXT, "posix_memalign");
    real_aligned_alloc = dlsym(RTLD_NEXT, "aligned_alloc");
    real_memalign = dlsym(RTLD_NEXT, "memalign");
    resolving = 0;
}

static int is_boot(void *p)
{
    return (char *)p >= boot_buf && (char *)p < boot_buf + sizeof boot_buf;
}

static void add(void *p)
{
    if (!p)
        return;
    long n = (long)malloc_usable_size(p);
    long c = __atomic_add_fetch(&cur_bytes, n, __ATOMIC_RELAXED);
    long pk = __atomic_load_n(&peak_bytes, __ATOMIC_RELAXED);
    while (c > pk && !__atomic_compare_exchange_n(&peak_bytes, &pk, c, 1, __ATOMIC_RELAXED,
                                                  __ATOMIC_RELAXED))
        ;
}

static void sub(void *p)
{
    if (p && !is_boot(p))
        __atomic_sub_fetch(&cur_bytes, (long)malloc_usable_size(p), __ATOMIC_RELAXED);
}

void *malloc(size_t n)
{
    resolve();
    void *p = real_malloc(n);
    add(p);
    return p;
}

void *calloc(size_t a, size_t b)
{
    if (!real_calloc) {
        if (resolving) {
            size_t n = (a * b + 15) & ~(size_t)15;
            if (boot_used + n > sizeof boot_buf)
                return NULL;
            void *p = boot_buf + boot_used;
            boot_used += n;
            memset(p, 0, n);
            return p;
        }
        resolve();
    }
    void *p = real_calloc(a, b);
    add(p);
    return p;
}

void *realloc(void *q, size_t n)
{
    resolve();
    if (is_boot(q)) {
        void *p = real_malloc(n);
        if (p)
            memcpy(p, q, n < sizeof boot_buf ? n : sizeof boot_buf);
        add(p);
        return p;
    }
    sub(q);
    void *p = real_realloc(q, n);
    if (p)
        add(p);
    else if (q && n)
        add(q);  /* failed: the old block is still live */
    return p;
}

void free(void *p)
{
    if (!p || is_boot(p))
        return;
    resolve();
    sub(p);
    real_free(p);
}

int posix_memalign(void **out, size_t al, size_t n)
{
    resolve();
    int r = real_posix_memalign(out, al, n);
    if (r == 0)
        add(*out);
    return r;
}

void *aligned_alloc(size_t al, size_t n)
{
    resolve();
    void *p = real_aligned_alloc(al, n);
    add(p);
    return p;
}

void *memalign(size_t al, size_t n)
{
    resolve();
    void *p = real_memalign(al, n);
    add(p);
    return p;
}

long mp_current(void) { return __atomic_load_n(&cur_bytes, __ATOMIC_RELAXED); }
long mp_peak(void) { return __atomic_load_n(&peak_bytes, __ATOMIC_RELAXED); }
void mp_reset(void) { __atomic_store_n(&peak_bytes, mp_current(), __ATOMIC_RELAXED); }
