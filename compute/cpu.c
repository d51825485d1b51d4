/*
 * cpu — CPUID/XGETBV feature detection and the process-wide SIMD level.
 *
 * Invariant: cpu_simd_level() returns the same value for the life of the
 * process, and never a level whose instructions or register state are
 * unavailable. AMX is deliberately ignored: it faults in some VMs.
 */
#include "compute/cpu.h"

#include <cpuid.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const cpu_simd_names[] = {
	[CPU_SIMD_SCALAR] = "scalar",
	[CPU_SIMD_AVX2] = "avx2",
	[CPU_SIMD_AVX2_VNNI] = "avxvnni",
	[CPU_SIMD_AVX512] = "avx512",
	[CPU_SIMD_AVX512_VNNI] = "avx512vnni",
};

static uint64_t cpu_xgetbv0(void)
{
	uint32_t lo, hi;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return ((uint64_t)hi << 32) | lo;
}

void cpu_features_detect(struct cpu_features *out)
{
	unsigned a, b, c, d;
	memset(out, 0, sizeof *out);
	if (!__get_cpuid(1, &a, &b, &c, &d))
		return;
	bool osxsave = c & (1u << 27);
	bool avx = c & (1u << 28);
	bool fma = c & (1u << 12);
	bool f16c = c & (1u << 29);
	if (!osxsave || !avx)
		return;
	uint64_t xcr0 = cpu_xgetbv0();
	/* XMM (bit 1) and YMM (bit 2) state must be saved by the OS for AVX. */
	if ((xcr0 & 0x6) != 0x6)
		return;
	/* Opmask, ZMM_Hi256 and Hi16_ZMM (bits 5-7) for AVX-512. */
	bool zmm_ok = (xcr0 & 0xe0) == 0xe0;
	if (__get_cpuid_max(0, NULL) < 7)
		return;
	__cpuid_count(7, 0, a, b, c, d);
	out->avx2 = b & (1u << 5);
	out->fma = fma;
	out->f16c = f16c;
	unsigned a1, b1, c1, d1;
	__cpuid_count(7, 1, a1, b1, c1, d1);
	out->avxvnni = a1 & (1u << 4);
	if (zmm_ok) {
		out->avx512f = b & (1u << 16);
		out->avx512dq = b & (1u << 17);
		out->avx512bw = b & (1u << 30);
		out->avx512vl = b & (1u << 31);
		out->avx512vnni = c & (1u << 11);
		out->avx512bf16 = a1 & (1u << 5);
	}
	(void)b1;
	(void)c1;
	(void)d1;
	(void)d;
}

bool cpu_simd_available(enum cpu_simd level)
{
	struct cpu_features f;
	cpu_features_detect(&f);
	bool avx2 = f.avx2 && f.fma && f.f16c;
	bool avx512 = avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
	switch (level) {
	case CPU_SIMD_SCALAR:
		return true;
	case CPU_SIMD_AVX2:
		return avx2;
	case CPU_SIMD_AVX2_VNNI:
		return avx2 && f.avxvnni;
	case CPU_SIMD_AVX512:
		return avx512;
	case CPU_SIMD_AVX512_VNNI:
		return avx512 && f.avx512vnni;
	case CPU_SIMD_COUNT:
		break;
	}
	return false;
}

/* The best available level at or below `want`. */
static enum cpu_simd cpu_simd_at_most(enum cpu_simd want)
{
	int level = (int)want;
	while (level > CPU_SIMD_SCALAR && !cpu_simd_available((enum cpu_simd)level))
		level--;
	return (enum cpu_simd)level;
}

enum cpu_simd cpu_simd_supported(void)
{
	return cpu_simd_at_most(CPU_SIMD_AVX512_VNNI);
}

const char *cpu_simd_name(enum cpu_simd level)
{
	if ((unsigned)level >= CPU_SIMD_COUNT)
		return "unknown";
	return cpu_simd_names[level];
}

int cpu_simd_parse(const char *name, enum cpu_simd *out)
{
	for (unsigned i = 0; i < CPU_SIMD_COUNT; i++) {
		if (name && strcmp(name, cpu_simd_names[i]) == 0) {
			*out = (enum cpu_simd)i;
			return 0;
		}
	}
	return -EINVAL;
}

static enum cpu_simd cpu_level;
static pthread_once_t cpu_level_once = PTHREAD_ONCE_INIT;

static void cpu_level_choose(void)
{
	enum cpu_simd level = cpu_simd_supported();
	const char *env = getenv("COLIBRI_SIMD");
	if (env && *env) {
		enum cpu_simd want;
		if (cpu_simd_parse(env, &want) != 0) {
			fprintf(stderr, "colibri: ignoring COLIBRI_SIMD=%s (want scalar, avx2, avxvnni, "
				"avx512 or avx512vnni)\n", env);
		} else {
			level = cpu_simd_at_most(want);
			if (level != want)
				fprintf(stderr, "colibri: COLIBRI_SIMD=%s not supported here, using %s\n",
					env, cpu_simd_name(level));
		}
	}
	cpu_level = level;
}

enum cpu_simd cpu_simd_level(void)
{
	pthread_once(&cpu_level_once, cpu_level_choose);
	return cpu_level;
}
