/*
 * cmd_convert — `colibri convert HF_DIR|MODEL.gguf OUT_DIR [--quant T]
 * [--dense-quant T] [--head-quant T] [--activations A] [--group-size N] [--force] [--quiet]`.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cli/cmd.h"
#include "engine/convert/convert.h"
#include "base/error.h"

static void convert_usage(FILE *f)
{
	fprintf(f,
		"usage: colibri convert HF_DIR|MODEL.gguf OUT_DIR [--quant int4|mxfp4|int8|bf16|f32]\n"
		"                       [--dense-quant int4|mxfp4|int8|bf16|f32] [--head-quant T]\n"
		"                       [--activations auto|int8|f32] [--group-size 64] [--force] [--quiet]\n"
		"  Converts a Hugging Face checkpoint, or a GGUF file (one file or any part of a\n"
		"  split -0000N-of-0000M.gguf), into a colibri container. A GGUF keeps every\n"
		"  tensor's type (f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k, mxfp4: the file's\n"
		"  bits) and brings its tokenizer and chat template; --quant requantizes instead.\n"
		"  --quant       routed-expert weights (default int4, or mxfp4 for experts released in\n"
		"                MXFP4 (gpt-oss), copied as they are; mxfp4: e2m1 values with a\n"
		"                power-of-two scale per 32 inputs, the released format of gpt-oss\n"
		"                and DeepSeek-V4's FP4 experts, kept exactly); norms and routers stay f32\n"
		"  --dense-quant dense weights (attention, shared experts, lm_head); default: as\n"
		"                --quant except int4 and mxfp4 -> int8; MTP layers keep int8 or better\n"
		"  --head-quant  lm_head alone (the largest dense matrix; default: as --dense-quant)\n"
		"  --activations what quantized weights multiply: auto (default) quantizes each\n"
		"                token's activations per 32 inputs, to int8 for int4, mxfp4 and a\n"
		"                GGUF's block types, to int16 for int8 weights, summed exactly in\n"
		"                integers (KL within 1.1x of f32 activations'); int8 uses int8 for\n"
		"                all (lossier); f32 dequantizes the weights instead (slower; a\n"
		"                GGUF's blocks then give the dequantized model's logits exactly)\n"
		"  --group-size  inputs per scale for int4/int8 (multiple of 32, default 64)\n"
		"  --force       replace an existing container at OUT_DIR\n"
		"  --quiet       no progress lines\n");
}

int cmd_convert(int argc, char **argv)
{
	struct convert_options o;
	convert_options_default(&o);
	static const struct option opts[] = {
		{ "quant", required_argument, 0, 'q' }, { "group-size", required_argument, 0, 'g' },
		{ "force", no_argument, 0, 'f' },       { "quiet", no_argument, 0, 's' },
		{ "help", no_argument, 0, 'h' },        { "dense-quant", required_argument, 0, 'd' },
		{ "activations", required_argument, 0, 'a' },
		{ "head-quant", required_argument, 0, 'H' },
		{ 0, 0, 0, 0 },
	};
	int ch;
	optind = 1;
	while ((ch = getopt_long(argc, argv, "q:d:H:a:g:fsh", opts, NULL)) != -1) {
		switch (ch) {
		case 'a':
			if (strcmp(optarg, "auto") && strcmp(optarg, "int8") && strcmp(optarg, "f32")) {
				fprintf(stderr, "colibri convert: --activations must be auto, int8 or f32, not \"%s\"\n",
					optarg);
				return 2;
			}
			o.activations = optarg;
			break;
		case 'd':
			if (quant_type_parse(optarg, &o.dense_quant) != 0 || !quant_type_quantizable(o.dense_quant)) {
				fprintf(stderr, "colibri convert: --dense-quant must be int4, mxfp4, int8, bf16, f16 or f32, not \"%s\"\n",
					optarg);
				return 2;
			}
			o.dense_quant_set = true;
			break;
		case 'H':
			if (quant_type_parse(optarg, &o.head_quant) != 0 || !quant_type_quantizable(o.head_quant)) {
				fprintf(stderr, "colibri convert: --head-quant must be int4, mxfp4, int8, bf16, f16 or f32, not \"%s\"\n",
					optarg);
				return 2;
			}
			o.head_quant_set = true;
			break;
		case 'q':
			if (quant_type_parse(optarg, &o.quant) != 0 || !quant_type_quantizable(o.quant)) {
				fprintf(stderr, "colibri convert: --quant must be int4, mxfp4, int8, bf16, f16 or f32, not \"%s\"\n",
					optarg);
				return 2;
			}
			o.quant_set = true;
			break;
		case 'g': {
			char *end;
			long g = strtol(optarg, &end, 10);
			if (*end || g <= 0 || g % 32 != 0 || g > 1 << 20) {
				fprintf(stderr, "colibri convert: --group-size must be a positive multiple of 32, not \"%s\"\n", optarg);
				return 2;
			}
			o.group = (int32_t)g;
			break;
		}
		case 'f':
			o.force = true;
			break;
		case 's':
			o.quiet = true;
			break;
		case 'h':
			convert_usage(stdout);
			return 0;
		default:
			convert_usage(stderr);
			return 2;
		}
	}
	if (argc - optind != 2)
		return cmd_usage_error("convert", argc - optind < 2 ? "needs a checkpoint (a folder or a .gguf) and "
						     "the container folder to write, in that order"
								    : "takes two arguments: the checkpoint and the container folder");
	o.hf_dir = argv[optind];
	o.out_dir = argv[optind + 1];
	if (convert_run(&o) != 0)
		return cmd_fail("conversion failed");
	if (!o.quiet)
		fprintf(stderr, "convert: wrote %s\n", o.out_dir);
	return 0;
}
