/*
 * cpu — which SIMD instruction sets this machine and its OS support, and the
 * one level the kernels use.
 *
 * The level is chosen once (first call) from CPUID and XGETBV and never
 * changes afterwards, so every kernel call in a process takes the same path
 * and results are reproducible. COLIBRI_SIMD=scalar|avx2|avx512 forces a
 * lower level for tests and debugging; a level the machine lacks is capped
 * to the best one it has, never executed.
 */
#ifndef COLIBRI_COMPUTE_CPU_H
#define COLIBRI_COMPUTE_CPU_H

#include <stdbool.h>

enum cpu_simd {
	CPU_SIMD_SCALAR = 0,
	CPU_SIMD_AVX2 = 1,   /* AVX2 + FMA + F16C with YMM state enabled */
	CPU_SIMD_AVX512 = 2, /* AVX-512 F/BW/VL/DQ with ZMM and opmask state enabled */
};

struct cpu_features {
	bool avx2;
	bool fma;
	bool f16c;
	bool avx512f;
	bool avx512bw;
	bool avx512vl;
	bool avx512dq;
	bool avx512vnni;
	bool avx512bf16;
};

/* Fills *out from CPUID, clearing every feature whose register state the OS
 * does not save (XGETBV). */
void cpu_features_detect(struct cpu_features *out);

/* Best level the machine supports, ignoring COLIBRI_SIMD. */
enum cpu_simd cpu_simd_supported(void);

/* The level the kernels use: cpu_simd_supported() lowered by COLIBRI_SIMD.
 * Computed on first call; thread-safe. */
enum cpu_simd cpu_simd_level(void);

/* "scalar", "avx2" or "avx512". */
const char *cpu_simd_name(enum cpu_simd level);

/* Parses a COLIBRI_SIMD value; -EINVAL if unknown. */
int cpu_simd_parse(const char *name, enum cpu_simd *out);

#endif
