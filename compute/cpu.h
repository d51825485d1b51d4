/*
 * cpu — which SIMD instruction sets this machine and its OS support, and the
 * one level the kernels use.
 *
 * The level is chosen once (first call) from CPUID and XGETBV and never
 * changes afterwards. Every level computes the same bits (docs/ARITHMETIC.md),
 * so the level changes speed only. COLIBRI_SIMD=scalar|avx2|avxvnni|avx512|
 * avx512vnni forces a level for tests and debugging; a level the machine
 * lacks falls back to the best one below it that it has, never executed.
 */
#ifndef COLIBRI_COMPUTE_CPU_H
#define COLIBRI_COMPUTE_CPU_H

#include <stdbool.h>

/* In order of preference; a machine may have a level without the ones below
 * it (Zen 4: avx512vnni, not avxvnni), so cpu_simd_available says which. */
enum cpu_simd {
	CPU_SIMD_SCALAR = 0,
	CPU_SIMD_AVX2 = 1,        /* AVX2 + FMA + F16C with YMM state enabled */
	CPU_SIMD_AVX2_VNNI = 2,   /* that + AVX-VNNI (VEX vpdpbusd / vpdpwssd) */
	CPU_SIMD_AVX512 = 3,      /* AVX-512 F/BW/VL/DQ with ZMM and opmask state */
	CPU_SIMD_AVX512_VNNI = 4, /* that + AVX512-VNNI */
	CPU_SIMD_COUNT
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
	bool avxvnni;
};

/* Fills *out from CPUID, clearing every feature whose register state the OS
 * does not save (XGETBV). */
void cpu_features_detect(struct cpu_features *out);

/* Whether the machine and its OS can run `level`. */
bool cpu_simd_available(enum cpu_simd level);

/* Best level the machine supports, ignoring COLIBRI_SIMD. */
enum cpu_simd cpu_simd_supported(void);

/* The level the kernels use: cpu_simd_supported() lowered by COLIBRI_SIMD.
 * Computed on first call; thread-safe. */
enum cpu_simd cpu_simd_level(void);

/* "scalar", "avx2", "avxvnni", "avx512" or "avx512vnni". */
const char *cpu_simd_name(enum cpu_simd level);

/* Parses a COLIBRI_SIMD value; -EINVAL if unknown. */
int cpu_simd_parse(const char *name, enum cpu_simd *out);

#endif
