/* Convert between float32 and IEEE half precision with the F16C instructions (x86-64).
 *
 * numpy converts float32 <-> float16 element by element in software at about 1 GB/s, slower
 * than a shared-memory transport moves bytes, so fp16 compression cost more than it saved.
 * VCVTPS2PH/VCVTPH2PS convert 8 values per instruction and run at memory speed.
 *
 * Rounding is to nearest even, as numpy's astype(float16); hpcdl.comm.compression checks at
 * load time that both give the same bits and falls back to numpy when this library is missing,
 * fails to build, or the CPU lacks F16C.  Built by scripts/setup.sh via hpcdl.comm._native.
 */
#include <stddef.h>
#include <stdint.h>
#include <immintrin.h>

#define F16C __attribute__((target("avx,f16c")))

/* Bumped whenever a function's arguments change: a library built from older source is not used. */
int hpcdl_f16_abi(void)
{
    return 2;
}

int hpcdl_f16c_supported(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
}

/* Tails of fewer than 8 elements go through a zero-padded vector. */
F16C static inline __m256 load_tail_f16(const uint16_t *src, size_t k)
{
    uint16_t tmp[8] = {0};
    for (size_t j = 0; j < k; j++) tmp[j] = src[j];
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)tmp));
}

F16C static inline void store_tail_f16(uint16_t *dst, __m256 v, size_t k)
{
    uint16_t tmp[8];
    _mm_storeu_si128((__m128i *)tmp, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    for (size_t j = 0; j < k; j++) dst[j] = tmp[j];
}

F16C static inline __m256 load_tail_f32(const float *src, size_t k)
{
    float tmp[8] = {0};
    for (size_t j = 0; j < k; j++) tmp[j] = src[j];
    return _mm256_loadu_ps(tmp);
}

F16C static inline void store_tail_f32(float *dst, __m256 v, size_t k)
{
    float tmp[8];
    _mm256_storeu_ps(tmp, v);
    for (size_t j = 0; j < k; j++) dst[j] = tmp[j];
}

/* dst[i] = half(src[i]) */
F16C void hpcdl_f32_to_f16(const float *src, uint16_t *dst, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    if (i < n) store_tail_f16(dst + i, load_tail_f32(src + i, n - i), n - i);
}

/* dst[i] = float(src[i]) */
F16C void hpcdl_f16_to_f32(const uint16_t *src, float *dst, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    if (i < n) store_tail_f32(dst + i, load_tail_f16(src + i, n - i), n - i);
}

/* acc[i] += float(src[i]) */
F16C void hpcdl_f16_add_f32(const uint16_t *src, float *acc, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i)));
        _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), v));
    }
    if (i < n)
        store_tail_f32(acc + i, _mm256_add_ps(load_tail_f32(acc + i, n - i),
                                              load_tail_f16(src + i, n - i)), n - i);
}

/* inout[i] = half(float(inout[i]) + float(in[i])): the float32 sum of two halves is exact, so
 * this rounds once, as a half-precision add does (the MPI reduction operator of mpi+fp16). */
F16C void hpcdl_f16_sum_f16(const uint16_t *in, uint16_t *inout, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(in + i)));
        __m256 b = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(inout + i)));
        _mm_storeu_si128((__m128i *)(inout + i),
                         _mm256_cvtps_ph(_mm256_add_ps(a, b), _MM_FROUND_TO_NEAREST_INT));
    }
    if (i < n)
        store_tail_f16(inout + i, _mm256_add_ps(load_tail_f16(in + i, n - i),
                                                load_tail_f16(inout + i, n - i)), n - i);
}

/* acc[i] = base[i] + float(src[i]); dst[i] = half(acc[i]): the ring's reduce-scatter hop in one
 * pass (add what came from the left to this rank's own input, encode the running sum for the
 * right).  base may be acc itself. */
F16C void hpcdl_f16_add_encode(const uint16_t *src, const float *base, float *acc, uint16_t *dst,
                               size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_add_ps(_mm256_loadu_ps(base + i),
                                 _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
        _mm256_storeu_ps(acc + i, v);
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
    if (i < n) {
        __m256 v = _mm256_add_ps(load_tail_f32(base + i, n - i), load_tail_f16(src + i, n - i));
        store_tail_f32(acc + i, v, n - i);
        store_tail_f16(dst + i, v, n - i);
    }
}

/* v = (base[i] + float(src[i])) * scale; dst[i] = half(v); acc[i] = float(dst[i]): the ring's
 * last reduce-scatter hop, which finishes this rank's own segment, averages it, encodes it once
 * for the allgather and keeps the value the others will see, in one pass.  base may be acc. */
F16C void hpcdl_f16_add_scale_roundtrip(const uint16_t *src, const float *base, float *acc,
                                        uint16_t *dst, size_t n, float scale)
{
    const __m256 s = _mm256_set1_ps(scale);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_add_ps(_mm256_loadu_ps(base + i),
                                 _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
        __m128i h = _mm256_cvtps_ph(_mm256_mul_ps(v, s), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(dst + i), h);
        _mm256_storeu_ps(acc + i, _mm256_cvtph_ps(h));
    }
    if (i < n) {
        __m256 v = _mm256_mul_ps(_mm256_add_ps(load_tail_f32(base + i, n - i),
                                               load_tail_f16(src + i, n - i)), s);
        store_tail_f16(dst + i, v, n - i);
        store_tail_f32(acc + i, load_tail_f16(dst + i, n - i), n - i);
    }
}

/* dst[i] = float(src[i]) * scale: decode and average in one pass (scale = 1/p). */
F16C void hpcdl_f16_to_f32_scaled(const uint16_t *src, float *dst, size_t n, float scale)
{
    const __m256 s = _mm256_set1_ps(scale);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_mul_ps(
            _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))), s));
    if (i < n) store_tail_f32(dst + i, _mm256_mul_ps(load_tail_f16(src + i, n - i), s), n - i);
}
