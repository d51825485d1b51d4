#!/usr/bin/python3
"""Runs the real Hugging Face transformers model code on the test fixtures.

What it checks: for each fixture build/fixtures/hf/<name>/ (a tiny
checkpoint from make_fixtures.sh; by default every folder there, so a new
fixture is covered without a list to edit) it builds the model from the
transformers v5.15.0 configuration and modeling files of its family, loads
the checkpoint's weights, runs the tokens of ref/<name>.tokens
teacher-forced (one sequence, positions 0..n-1, use_cache=False, eager
attention, CPU) and compares the logits with ref/<name>.f32, which the
numpy reference (reference.py and its ref_*.py) wrote.  Where the fixture
has an MTP reference (ref/<name>.mtp.f32) it runs the first MTP head
through transformers' own MtpModel too, or records why transformers has
nothing that runs it (see "MTP heads").  So it proves the reference, and
through it the engine's tests, against transformers itself.  It prints one
line per fixture (largest |diff|, that over the largest |ref|, the largest
of each row's |diff| over that row's largest |ref|, top-1 agreement) and
exits 1 when a relative difference exceeds --tol (default 1e-5) or a top-1
differs, 2 on a setup error (missing fixtures, wrong transformers version).
--json-dir DIR writes DIR/<name>.json per fixture (see "Results"); the
committed ones are tests/ref/transformers/, which tests/test_references.c
checks.  --layers adds, for a failing fixture, the difference after the
embeddings and after each decoder layer against reference.py --dump-hidden
(run from --ref-tools into a scratch folder), which names the first layer
that diverges.

    /usr/bin/python3 tools/hf_check.py --transformers /work/hf-transformers/src \\
        --fixtures build/fixtures [--names a,b] [--dtype float32|float64] [--tol 1e-5]
        [--json-dir DIR] [--transformers-commit SHA] [--fp8 config|grid] [--layers]
        [--ref-tools DIR] [--float64-casts] [--any-version]

An offline tool, not part of CI or of tools/run_tests.sh: it needs Debian's
python3-torch (1.13) with python3-packaging, python3-regex, python3-tqdm and
python3-filelock, and a transformers source tree at tag v5.15.0 (for
example `git worktree add DIR v5.15.0` in a transformers clone; pass
DIR/src).  It reads __version__ from that tree and refuses anything but
5.15.0 unless --any-version.  Verified against transformers 5.15.0 (commit
5eddc12edf, "Release: v5.15.0").  No transformers code is copied here; the
shim only builds the package skeleton around the real files.

The shim.  transformers v5 wants torch >= 2.5, huggingface_hub and
safetensors, which Debian 12 lacks, and its package __init__ pulls in the hub
client, tokenizers and the whole from_pretrained machinery.  So
transformers/__init__.py never runs: empty package modules (transformers,
.utils, .integrations, .generation, .quantizers, .distributed, .models,
.models.<family>) go into sys.modules with their real __path__, and these
real files are loaded one by one: utils/{import_utils, logging, generic,
doc, constants, deprecation, output_capturing}.py, configuration_utils.py,
generation/configuration_utils.py, integrations/heterogeneity,
modeling_rope_utils.py, activations.py, integrations/hub_kernels.py,
integrations/moe.py, cache_utils.py, masking_utils.py, modeling_outputs.py,
initialization.py, core_model_loading.py, conversion_mapping.py,
modeling_layers.py, and each family's configuration_*.py and modeling_*.py.  What is stubbed, and why it
changes no arithmetic of the forward pass:

- huggingface_hub: dataclasses.strict keeps transformers' accept-kwargs
  __init__ (the copy in configuration_utils) and adds validate(), which runs
  the class's validate_* methods but not the per-field type checks (they
  only raise); utils' progress-bar switches are no-ops.  No hub call is made.
- transformers.utils' __init__: names come from the real import_utils,
  generic, doc and constants modules; the hub helpers (cached_file,
  PushToHubMixin, hf_api, ...) are inert, auto_docstring returns its
  argument (it only writes docstrings).
- import_utils.is_torch_available() is forced true (its test is torch >=
  2.5); is_torch_greater_or_equal stays honest, so version-gated code takes
  its older-torch branch (masking_utils builds masks without vmap, the
  default anyway).
- torch 1.13 gets what v5 calls and it lacks: nn.Buffer (a tensor that
  Module.__setattr__ registers as a buffer, persistent or not), a bare
  @torch.no_grad decorator, torch.is_autocast_enabled(device_type),
  torch.compiler.is_compiling() (false), torch.utils._pytree
  .register_pytree_node (ModelOutput registration, for torch.compile only)
  and no-op torch.library.custom_op / register_fake / register_autograd
  (integrations/moe.py registers its grouped_mm fallback, a path not taken).
- modeling_utils: PreTrainedModel is an nn.Module that keeps the config and
  sets config._attn_implementation = "eager" and _experts_implementation =
  "eager" (the experts class's own forward: the one-hot loop with
  index_add), registers the class's _can_record_outputs as the real
  __init__ does (output_hidden_states collects through it), and has the
  real base_model, get_decoder and get_input_embeddings lookups (cases 1, 3
  and 4) that MtpModel and InklingModel call; post_init does nothing (every
  weight is loaded afterwards, and checked to be).  ALL_ATTENTION_FUNCTIONS
  answers eager only.  LoadStateDictConfig and
  _get_resolved_checkpoint_files, which modeling_layers imports for
  MtpModel.from_pretrained, are inert (see "MTP heads"), as are
  loading_report.log_state_dict_report and safetensors.safe_open.
- modeling_layers is the real file: GradientCheckpointingLayer only calls
  forward outside training, MtpModel and MtpLayer run the MTP heads.
- integrations.accelerate.force_accelerate_hooks (Qwen3.5 / Qwen3-Next
  DeltaNet forward) returns the forward unchanged: it only fires a child's
  accelerate hook, and no module has one here.  The real
  use_kernel_func_from_hub_with_fallback is used; it tries the fla and
  causal_conv1d packages, which Debian lacks, so the torch functions of the
  modeling file run (torch_chunk_gated_delta_rule, causal_conv1d_fn).
  models.auto's AutoModel is inert: only the VLM wrapper Qwen3_5MoeModel
  builds towers with it, and it is not built.
- Inert, never called: generation.GenerationMixin, dynamic_module_utils,
  modeling_gguf_pytorch_utils, modeling_flash_attention_utils,
  processing_utils (Unpack from typing_extensions), integrations.deepgemm and
  .sonicmoe (GPU experts kernels), and core_model_loading's distributed /
  accelerate / tensor-parallel / loading-report imports.
- safetensors: tensors are read with tools/safetensors_np.py and converted
  exactly (bf16 -> float32 by bit shift, fp8 e4m3 by table).

Loading.  from_pretrained lives in the real modeling_utils (DTensor,
accelerate hooks, torch 2.x), so the model is built from its config class
(config_cls.from_dict(config.json)) and its state dict assembled the way
core_model_loading.convert_and_load_state_dict_in_model does it: keys sorted
by dot_natural_key, renamed by the real rename_source_key with the real
conversion mapping of the class / model_type plus "legacy"
(conversion_mapping.py), and each WeightConverter's real ops applied
(MergeModulelist(dim=0) then Concatenate(dim=1): per-expert gate/up/down to
mlp.experts.gate_up_proj [E, 2I, H] and down_proj [E, H, I]; Mixtral's
block_sparse_moe renamed mlp).  MTP layers (model.layers.N, N >=
num_hidden_layers) and keys matching _keys_to_ignore_on_load_unexpected are
dropped, as from_pretrained leaves them unloaded (the MTP run loads them
into MtpModel, see "MTP heads"); any other unexpected or missing key, or a
shape mismatch, is an error.

gpt-oss MXFP4 experts (*_blocks / *_scales, U8) are dequantized before the
mapping by transformers' own integrations/mxfp4.convert_moe_packed_tensors,
which is what its MXFP4 quantizer runs on a CPU without the triton kernels
(it sets dequantize, and Mxfp4Dequantize calls that function, to bf16,
exactly); integrations/mxfp4.py sees a torch whose torch.int is int64 (torch
1.13 indexes with int64 only; the same table entries are read) and that
has torch.OutOfMemoryError; distributed.utils' _is_torch_distributed_initialized
is false.  Each such tensor is also compared with ref_gpt_oss's own
dequantization, and a difference fails the fixture.

FP8 e4m3 weights are dequantized before the mapping, w = fp8 * scale_inv in
float32.  Without a GPU transformers' FineGrainedFP8 quantizer dequantizes
with integrations/finegrained_fp8.Fp8Dequantize, whose _dequantize_one takes
the block as weight shape / scale-grid shape; that file needs
torch.float8_e4m3fn, so its formula is repeated here.  For a dimension that
is not a multiple of 128 (the tiny DeepSeek q_b_proj [192, 64] with a
[2, 1] grid) that reads 96-row blocks where the checkpoint format (DeepSeek's
weight_dequant, vLLM, the numpy reference, colibri) means 128-row tiles with
a partial last one.  --fp8 config (the default) uses the fixed
quantization_config.weight_block_size tiles; --fp8 grid reproduces
transformers' CPU dequantization; each fp8 fixture prints a note when the
two differ.

Qwen3.5-MoE.  Both layouts are run through Qwen3_5MoeForCausalLM, the text
model: for the VLM layout (model_type qwen3_5_moe) its config is
text_config, so the conversion mapping is qwen3_5_moe_text's (PrefixChange
model.language_model. -> model., plus qwen2_moe's expert fusion), and
model.visual.* and mtp.* are dropped as _keys_to_ignore_on_load_unexpected
says.  Qwen3-Next: Qwen3NextForCausalLM, mtp.* dropped.  With use_cache=False
their DeltaNet layers run torch_chunk_gated_delta_rule (chunks of 64), an
independent check of the reference's token-by-token recurrence.

Inkling.  The released layout (model_type inkling_mm_model) runs as
InklingForConditionalGeneration itself, whose InklingModel applies
embed_norm and builds the masks before InklingTextModel.  The names go
through the real inkling_mm_model rules (WeightRenaming model.llm. ->
model.language_model., the w13 WeightConverters with Interleave and Chunk,
...); model.mtp.* is dropped as _keys_to_ignore_on_load_unexpected says, and
model.visual.* / model.audio.* are dropped too, the vision and audio towers
keeping their construction values: the text path never reads them.  The
shim's PreTrainedModel has get_input_embeddings (the direct, model and
language_model cases of the real EmbeddingAccessMixin), which InklingModel
calls.  (Its _keep_in_fp32_modules_strict, the short convolutions, applies
at float16 and bfloat16 only, so not here.)

Then model.to(dtype): float32, or float64 for a sharper comparison; at
either dtype from_pretrained keeps nothing in float32 (its dtype plan reads
_keep_in_fp32_modules at float16 only, _keep_in_fp32_modules_strict at
float16 and bfloat16).  transformers' code still computes RoPE cos/sin, the
router, the DSA indexer scores and the attention softmax in float32 there;
Qwen3.5 / Qwen3-Next also their zero-centred norms, the DeltaNet gate g and
the whole chunked delta rule (it casts to float32).  --float64-casts, a
diagnostic that does change transformers' arithmetic, turns those casts of
the modeling file into float64 as well (see WIDEN_CASTS).

MTP heads.  transformers v5.15.0 runs an MTP head only through MtpModel
(modeling_layers.py, what generate(use_mtp=True) drafts with), and only for
a config with num_mtp_layers: DeepseekV3Config and Glm4MoeConfig (from
num_nextn_predict_layers) and InklingTextConfig.  DeepseekV32Config,
GlmMoeDsaConfig, DeepseekV4Config, Qwen3.5 and Qwen3-Next have none, their
causal LMs drop the MTP weights at load, and the result says so
(status not_in_transformers).  Where the fixture has no ref/<name>.mtp.f32
the result says that (no_reference).  Otherwise MtpModel(main_model,
num_mtp_layers) is built as MTPCandidateGenerator builds it and loaded the
way MtpModel.from_pretrained does (the checkpoint's model.layers.N, N >=
num_hidden_layers, which its class pattern selects, there model.layers.61;
renamed layers.N. -> layers.(N - num_hidden_layers).mtp_block., then the
"MtpModel" rules, then the main model's conversions; the embedding and the
head are the main model's).  As built it cannot hold DeepSeek-V3's or
GLM-4.5's MTP layer: MtpLayer makes its block as DecoderLayer(config,
layer_idx=0), a dense MLP while first_k_dense_replace > 0 (3 in
DeepSeek-V3, 1 in GLM-4.5-Air and here), where the checkpoint's layer is
MoE; the state dict does not match (from_pretrained would raise on the
missing keys).  The result records that (as_built) and then builds it
again with the MTP config's first_k_dense_replace set to 0, which changes
which MLP class the block gets and no arithmetic (status
compared_with_override, override says so).  The head runs teacher-forced
as the generator feeds it after a prefill of tokens 0..n-1: row t gets
token t+1 at position t+1 and the main model's hidden_states[-1] (the
final-normed hidden state) at t; MtpModel.forward itself runs, and since
it projects only its last row, a hook takes the MtpLayer's output for every
row and MtpModel._project_to_logits makes logits of them, compared with
ref/<name>.mtp.f32 [n - 1, vocab] (the reference numbers the rows 0..n-2;
RoPE is relative, so only rounding differs).

Results.  --json-dir DIR writes DIR/<name>.json: fixture, model_type
(config.json's) and transformers' (model_type, class), transformers version,
commit (--transformers-commit, else git rev-parse in --transformers) and a
sha256 over the transformers source files this run loaded, torch version,
dtype, --fp8, the bound (--tol; top-1 everywhere), n_tokens, logits {n,
finite, top1, max_ref, max_abs, rel = max|diff| / max|ref|, row_rel = the
largest of each row's max|diff| / max|ref|}, mtp {status, reason or
logits, as_built / override where used, the checkpoint's MTP tensor count},
notes (fp8 and MXFP4), pass, error, the command line, the date (UTC), the
host CPU, and the fixture's identity: fixture_files, the sha256 of each
file the result is made from (hf/<name>/config.json, every
hf/<name>/*.safetensors sorted bytewise, ref/<name>.tokens, ref/<name>.f32
and ref/<name>.mtp.f32 where present), and fixture_sha256, the sha256 of
what `sha256sum` prints for them in that order (run from the fixtures
folder), which tests/test_references.c recomputes.
"""

import argparse
import importlib
import json
import os
import re
import sys
import types

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import safetensors_np as st  # noqa: E402

VERIFIED_VERSION = "5.15.0"

# model_type -> (folder under models/, config class, causal LM class)
FAMILIES = {
    "olmoe": ("olmoe", "OlmoeConfig", "OlmoeForCausalLM"),
    "qwen3_moe": ("qwen3_moe", "Qwen3MoeConfig", "Qwen3MoeForCausalLM"),
    "mixtral": ("mixtral", "MixtralConfig", "MixtralForCausalLM"),
    "deepseek_v3": ("deepseek_v3", "DeepseekV3Config", "DeepseekV3ForCausalLM"),
    "glm4_moe": ("glm4_moe", "Glm4MoeConfig", "Glm4MoeForCausalLM"),
    "deepseek_v32": ("deepseek_v32", "DeepseekV32Config", "DeepseekV32ForCausalLM"),
    "glm_moe_dsa": ("glm_moe_dsa", "GlmMoeDsaConfig", "GlmMoeDsaForCausalLM"),
    # The VLM layout is run as its text model: Qwen3_5MoeForCausalLM built
    # from text_config, loading model.language_model.* (see build_model).
    "qwen3_5_moe": ("qwen3_5_moe", "Qwen3_5MoeTextConfig", "Qwen3_5MoeForCausalLM"),
    "qwen3_5_moe_text": ("qwen3_5_moe", "Qwen3_5MoeTextConfig", "Qwen3_5MoeForCausalLM"),
    "qwen3_next": ("qwen3_next", "Qwen3NextConfig", "Qwen3NextForCausalLM"),
    "deepseek_v4": ("deepseek_v4", "DeepseekV4Config", "DeepseekV4ForCausalLM"),
    "minimax_m2": ("minimax_m2", "MiniMaxM2Config", "MiniMaxM2ForCausalLM"),
    "gpt_oss": ("gpt_oss", "GptOssConfig", "GptOssForCausalLM"),
    # The released multimodal layout, run as InklingForConditionalGeneration
    # itself (text path: its towers are built but get no input; see build_model).
    "inkling_mm_model": ("inkling", "InklingConfig", "InklingForConditionalGeneration"),
}



class SetupError(Exception):
    pass


# ---------------------------------------------------------------- the shim


def _module(name, path=None, **attrs):
    """Registers an empty (package) module in sys.modules."""
    m = types.ModuleType(name)
    if path is not None:
        m.__path__ = [path]
    m.__dict__.update(attrs)
    sys.modules[name] = m
    parent, _, child = name.rpartition(".")
    if parent and parent in sys.modules:
        setattr(sys.modules[parent], child, m)
    return m


class _Inert:
    """Stand-in for classes and functions on no path the forward takes."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        raise RuntimeError("hf_check shim: an inert stand-in was called")


def _inert_function(name):
    def f(*args, **kwargs):
        raise RuntimeError("hf_check shim: %s is not available" % name)
    f.__name__ = name
    return f


def _inert_attr(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _inert_function(name)


def _patch_torch(torch):
    nn = torch.nn
    if not hasattr(nn, "Buffer"):
        # torch >= 2.5: nn.Buffer(t, persistent=True) assigned to a Module
        # attribute registers t as a buffer.
        class Buffer:
            def __new__(cls, data=None, *, persistent=True):
                t = torch.empty(0) if data is None else data
                t._hf_check_buffer_persistent = persistent
                return t

        nn.Buffer = Buffer
        orig_setattr = nn.Module.__setattr__

        def __setattr__(self, name, value):
            if isinstance(value, torch.Tensor) and hasattr(value, "_hf_check_buffer_persistent"):
                persistent = value._hf_check_buffer_persistent
                del value._hf_check_buffer_persistent
                if name in self._buffers:
                    self._buffers[name] = value
                    if persistent:
                        self._non_persistent_buffers_set.discard(name)
                    else:
                        self._non_persistent_buffers_set.add(name)
                else:
                    self.register_buffer(name, value, persistent=persistent)
                return
            orig_setattr(self, name, value)

        nn.Module.__setattr__ = __setattr__
    try:
        torch.no_grad(lambda: None)
    except TypeError:
        # torch >= 2.1 accepts a bare @torch.no_grad (no parentheses).
        orig_no_grad = torch.no_grad

        class no_grad(orig_no_grad):
            def __new__(cls, func=None):
                if callable(func):
                    return orig_no_grad()(func)
                return super().__new__(cls)

            def __init__(self, func=None):
                super().__init__()

        torch.no_grad = no_grad
    for name in ("custom_op", "register_fake", "register_autograd"):
        # integrations/moe.py registers its grouped_mm fallback as a custom
        # op (the "grouped_mm" experts path, never taken here).
        if not hasattr(torch.library, name):
            setattr(torch.library, name, lambda *args, **kwargs: None)
    if not hasattr(torch, "compiler"):
        # torch >= 2.3; nothing is compiled here.
        torch.compiler = types.ModuleType("torch.compiler")
        torch.compiler.is_compiling = lambda: False
        torch.compiler.is_exporting = lambda: False
        sys.modules["torch.compiler"] = torch.compiler
    import torch.utils._pytree as pytree
    if not hasattr(pytree, "register_pytree_node"):
        # utils/generic.py registers each ModelOutput for torch.compile/export.
        def register_pytree_node(typ, flatten_fn, unflatten_fn, **kwargs):
            pytree._register_pytree_node(typ, flatten_fn, unflatten_fn)
        pytree.register_pytree_node = register_pytree_node
        pytree._dict_flatten_with_keys = None
    orig_enabled = torch.is_autocast_enabled
    try:
        orig_enabled("cpu")
    except TypeError:
        def is_autocast_enabled(device_type=None):
            if device_type == "cpu":
                return torch.is_autocast_cpu_enabled()
            return orig_enabled()
        torch.is_autocast_enabled = is_autocast_enabled


def _stub_huggingface_hub():
    from dataclasses import MISSING, fields
    from functools import wraps

    hub = _module("huggingface_hub", path="", __version__="0.0-hf_check-stub")
    _module("huggingface_hub.utils", are_progress_bars_disabled=lambda *a, **k: True,
            enable_progress_bars=lambda *a, **k: None, disable_progress_bars=lambda *a, **k: None)

    def strict(cls=None, *, accept_kwargs=False):
        # huggingface_hub.dataclasses.strict without the type checks:
        # accept_kwargs wraps __init__ as transformers' copy of it does
        # (configuration_utils.wrap_init_to_accept_kwargs), validate() runs
        # the class's validate_* methods.
        def wrap(cls):
            if accept_kwargs:
                original_init = cls.__init__

                @wraps(original_init)
                def __init__(self, *args, **kwargs):
                    if args:
                        raise ValueError("%s accepts only keyword arguments" % cls.__name__)
                    names = {f.name for f in fields(cls)}
                    for f in fields(cls):
                        if f.name in kwargs:
                            setattr(self, f.name, kwargs[f.name])
                        elif f.default is not MISSING:
                            setattr(self, f.name, f.default)
                        elif f.default_factory is not MISSING:
                            setattr(self, f.name, f.default_factory())
                        else:
                            raise TypeError("Missing required field - '%s'" % f.name)
                    self.__post_init__(**{k: v for k, v in kwargs.items() if k not in names})

                cls.__init__ = __init__

            def validate(self):
                for name in dir(type(self)):
                    if name.startswith("validate_") and callable(getattr(type(self), name)):
                        getattr(self, name)()

            cls.validate = validate
            return cls

        return wrap if cls is None else wrap(cls)

    _module("huggingface_hub.dataclasses", strict=strict)
    hub.is_offline_mode = lambda: True
    return hub


def _skeleton_utils(pkg_dir):
    """transformers.utils without its __init__: real submodules, inert hub names."""
    utils = _module("transformers.utils", path=os.path.join(pkg_dir, "utils"))
    stubs = {
        "CONFIG_NAME": "config.json",
        "GENERATION_CONFIG_NAME": "generation_config.json",
        "SAFE_WEIGHTS_NAME": "model.safetensors",
        "WEIGHTS_NAME": "pytorch_model.bin",
        "PushToHubMixin": type("PushToHubMixin", (), {"push_to_hub": _inert_function("push_to_hub")}),
        "cached_file": _inert_function("cached_file"),
        "extract_commit_hash": _inert_function("extract_commit_hash"),
        "download_url": _inert_function("download_url"),
        "is_remote_url": lambda *a, **k: False,
        "hf_api": None,
        "auto_docstring": lambda obj=None, **kw: obj if obj is not None else (lambda o: o),
    }
    real = ("import_utils", "generic", "doc", "constants")

    def __getattr__(name):
        if name in stubs:
            return stubs[name]
        for sub in real:
            m = sys.modules.get("transformers.utils." + sub)
            if m is not None and hasattr(m, name):
                return getattr(m, name)
        raise AttributeError("hf_check shim: transformers.utils.%s is not provided" % name)

    utils.__getattr__ = __getattr__
    return utils


def install_shim(src, any_version=False):
    """Makes the transformers package under SRC importable enough to build
    and run the model families of FAMILIES.  Returns the transformers module."""
    pkg_dir = os.path.join(src, "transformers")
    init_path = os.path.join(pkg_dir, "__init__.py")
    if not os.path.exists(init_path):
        raise SetupError("%s: no transformers package there (pass the checkout's src/)" % src)
    with open(init_path) as f:
        m = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M)
    if not m:
        raise SetupError("%s: no __version__" % init_path)
    version = m.group(1)
    if version != VERIFIED_VERSION and not any_version:
        raise SetupError("transformers %s at %s; this tool is verified against %s only "
                         "(--any-version to run anyway)" % (version, src, VERIFIED_VERSION))
    if "transformers" in sys.modules:
        return sys.modules["transformers"]

    import torch
    _patch_torch(torch)
    _stub_huggingface_hub()

    tf = _module("transformers", path=pkg_dir, __version__=version, __file__=init_path)
    _skeleton_utils(pkg_dir)
    import transformers.utils.import_utils as import_utils
    # The real test is "torch >= 2.5"; the modeling files only need it true.
    import_utils.is_torch_available = lambda: True
    for sub in ("logging", "generic", "doc", "constants", "deprecation", "output_capturing"):
        importlib.import_module("transformers.utils." + sub)

    integ = _module("transformers.integrations", path=os.path.join(pkg_dir, "integrations"))
    # GPU experts kernels, imported by integrations/moe.py and finegrained_fp8.py.
    _module("transformers.integrations.deepgemm").__getattr__ = _inert_attr
    _module("transformers.integrations.sonicmoe",
            sonicmoe_experts_forward=_inert_function("sonicmoe_experts_forward"))
    _module("transformers.generation", path=os.path.join(pkg_dir, "generation"),
            GenerationMixin=type("GenerationMixin", (), {}))
    _module("transformers.dynamic_module_utils", custom_object_save=_inert_function("custom_object_save"))
    _module("transformers.modeling_gguf_pytorch_utils",
            load_gguf_checkpoint=_inert_function("load_gguf_checkpoint"))
    # core_model_loading (WeightRenaming, WeightConverter and their ops) for
    # conversion_mapping; its distributed and accelerate imports are inert.
    _module("transformers.distributed", path=os.path.join(pkg_dir, "distributed"))
    _module("transformers.distributed.sharding_utils", DtensorShardOperation=_Inert,
            _dtensor_from_local_like=_inert_function("_dtensor_from_local_like"))
    _module("transformers.distributed.utils", is_dtensor=lambda t: False,
            _is_torch_distributed_initialized=lambda: False)
    # force_accelerate_hooks fires a child's accelerate hook before the
    # parent's forward (Qwen3.5 / Qwen3-Next DeltaNet on conv1d); no module
    # has a hook here, so the decorator returns the forward unchanged.
    _module("transformers.integrations.accelerate", get_device=_inert_function("get_device"),
            offload_weight=_inert_function("offload_weight"),
            force_accelerate_hooks=lambda names: (lambda forward: forward))
    _module("transformers.integrations.tensor_parallel", ALL_PARALLEL_STYLES={},
            to_local=_inert_function("to_local"))
    _module("transformers.quantizers", path=os.path.join(pkg_dir, "quantizers"))
    _module("transformers.utils.loading_report", LoadStateDictInfo=_Inert)
    import transformers.generation.configuration_utils  # noqa: F401
    import transformers.integrations.heterogeneity  # noqa: F401
    import transformers.modeling_rope_utils  # noqa: F401
    import transformers.configuration_utils  # noqa: F401
    import transformers.integrations.hub_kernels as hub_kernels
    import transformers.integrations.moe as moe
    for name in ("use_kernel_forward_from_hub", "use_kernelized_func", "use_kernel_func_from_hub",
                 "use_kernel_func_from_hub_with_fallback"):
        setattr(integ, name, getattr(hub_kernels, name))
    integ.use_experts_implementation = moe.use_experts_implementation
    import transformers.activations  # noqa: F401
    import transformers.cache_utils  # noqa: F401
    import transformers.masking_utils  # noqa: F401
    import transformers.modeling_outputs  # noqa: F401
    import transformers.initialization  # noqa: F401
    from typing import TypedDict

    from typing_extensions import Unpack

    _module("transformers.processing_utils", Unpack=Unpack)
    _module("transformers.modeling_flash_attention_utils",
            FlashAttentionKwargs=TypedDict("FlashAttentionKwargs", {}, total=False))

    nn = torch.nn

    class AttentionInterface(dict):
        def get_interface(self, implementation, default):
            if implementation not in (None, "eager"):
                raise KeyError("hf_check shim: attention %r is not available" % implementation)
            return default

    class PreTrainedModel(nn.Module):
        """The part of transformers.modeling_utils.PreTrainedModel that a
        forward pass reads: the config, eager attention and experts."""

        config_class = None
        base_model_prefix = ""
        _keys_to_ignore_on_load_unexpected = None

        def __init__(self, config, *args, **kwargs):
            super().__init__()
            config._attn_implementation = "eager"
            config._experts_implementation = "eager"
            self.config = config
            # As the real __init__ does: capture_outputs finds the modules
            # whose outputs output_hidden_states collects through it.
            from transformers.utils.output_capturing import _CAN_RECORD_REGISTRY
            _CAN_RECORD_REGISTRY[str(self.__class__)] = getattr(self, "_can_record_outputs", None)

        def post_init(self):
            pass

        @property
        def base_model(self):
            return getattr(self, self.base_model_prefix, self)

        def get_input_embeddings(self):
            # EmbeddingAccessMixin.get_input_embeddings's cases 1, 3 and 4,
            # the ones the families here reach (a causal LM: its model's
            # embed_tokens; InklingModel: its language_model's).
            if getattr(self, "embed_tokens", None) is not None:
                return self.embed_tokens
            model = getattr(self, "model", None)
            if model is not None and hasattr(model, "embed_tokens"):
                return model.embed_tokens
            lm = getattr(self, "language_model", None)
            if lm is not None and lm is not self:
                return lm.get_input_embeddings()
            raise NotImplementedError("hf_check shim: get_input_embeddings for %s" % type(self).__name__)

        def get_decoder(self):
            # EmbeddingAccessMixin.get_decoder, which MtpModel asks for the
            # main model's decoder layers, norm class and rotary embedding.
            for name in ("language_model", "text_model", "decoder", "text_decoder"):
                if hasattr(self, name):
                    return getattr(self, name)
            if self.base_model is not self and hasattr(self.base_model, "get_decoder"):
                return self.base_model.get_decoder()
            return self

    # modeling_layers is the real file (GradientCheckpointingLayer, which in
    # eval mode only calls forward, and MtpModel / MtpLayer for the MTP
    # heads); these are the names it imports for MtpModel.from_pretrained
    # and the sequence-classification heads, none of them called here.
    _module("transformers.modeling_utils", PreTrainedModel=PreTrainedModel,
            ALL_ATTENTION_FUNCTIONS=AttentionInterface(), LoadStateDictConfig=_Inert,
            _get_resolved_checkpoint_files=_inert_function("_get_resolved_checkpoint_files"))
    if "safetensors" not in sys.modules:
        try:
            import safetensors  # noqa: F401
        except ImportError:
            _module("safetensors", safe_open=_inert_function("safe_open"))
    sys.modules["transformers.utils.loading_report"].log_state_dict_report = \
        _inert_function("log_state_dict_report")
    import transformers.conversion_mapping  # noqa: F401

    _module("transformers.models", path=os.path.join(pkg_dir, "models"))
    # Qwen3_5MoeModel (the VLM wrapper, not built here) makes its towers with
    # AutoModel.from_config and modeling_layers imports AutoModel; the auto
    # package's __init__ imports every family.
    _module("transformers.models.auto", path=os.path.join(pkg_dir, "models", "auto"), AutoModel=_Inert)
    _module("transformers.models.auto.modeling_auto", AutoModel=_Inert)
    import transformers.modeling_layers  # noqa: F401
    return tf


def load_family(model_type):
    if model_type not in FAMILIES:
        raise SetupError("model_type %r is not one this tool runs" % model_type)
    folder, config_cls, lm_cls = FAMILIES[model_type]
    import transformers
    pkg = "transformers.models." + folder
    if pkg not in sys.modules:
        _module(pkg, path=os.path.join(transformers.__path__[0], "models", folder))
    cfg_mod = importlib.import_module(pkg + ".configuration_" + folder)
    mdl_mod = importlib.import_module(pkg + ".modeling_" + folder)
    if WIDEN_CASTS:
        widen_casts(mdl_mod)
    return getattr(cfg_mod, config_cls), getattr(mdl_mod, lm_cls), mdl_mod


# --float64-casts: a diagnostic, not the check.  It changes transformers'
# arithmetic: the modeling file's own float32 casts (x.float(), torch.float32,
# softmax(dtype=torch.float)) become float64, so that with --dtype float64
# everything runs in float64 (norms, router, RoPE, attention softmax, and
# Qwen3.5 / Qwen3-Next's chunked delta rule, which casts to float32).  What is
# left is then the reference's own error and the float32 storage of its logits.
WIDEN_CASTS = False


def widen_casts(mdl_mod):
    import torch

    class _Float64Torch(types.ModuleType):
        float32 = torch.float64
        float = torch.float64

        def __getattr__(self, name):
            return getattr(torch, name)

    mdl_mod.torch = _Float64Torch("torch")
    torch.Tensor.float = torch.Tensor.double


# ---------------------------------------------------------------- loading


def _dequantize_grid(quantized, scales, output_dtype):
    """transformers' Fp8Dequantize._dequantize_one (integrations/finegrained_fp8.py,
    the CPU path: FineGrainedFP8 sets dequantize=True without a GPU): the block is
    derived from the scale grid, rows / scale_rows by cols / scale_cols, and
    w = fp8 * scale in float32.  The real method is used when that file imports
    (it needs torch.float8_e4m3fn, which torch 1.13 lacks); this is its formula."""
    import torch
    rows, cols = quantized.shape[-2:]
    srows, scols = scales.shape[-2:]
    if rows % srows or cols % scols:
        raise SetupError("Fp8Dequantize: weight %s not divisible by scale grid %s"
                         % (list(quantized.shape), list(scales.shape)))
    q = quantized.to(torch.float32).reshape(-1, srows, rows // srows, scols, cols // scols)
    s = scales.to(torch.float32).reshape(-1, srows, scols).unsqueeze(-1).unsqueeze(2)
    return (q * s).to(output_dtype).reshape(quantized.shape)


def _dequantize_blocks(quantized, scales, block, output_dtype):
    """DeepSeek's convention (inference weight_dequant, vLLM, the checkpoint
    format): fixed block x block tiles from the top left, the last ones partial;
    w = fp8 * scale in float32."""
    import torch
    rows, cols = quantized.shape[-2:]
    br, bc = block
    want = (-(-rows // br), -(-cols // bc))
    if tuple(scales.shape[-2:]) != want:
        raise SetupError("weight %s with %s blocks wants a %s scale grid, found %s"
                         % (list(quantized.shape), list(block), list(want), list(scales.shape)))
    s = scales.to(torch.float32).repeat_interleave(br, dim=-2).repeat_interleave(bc, dim=-1)
    s = s[..., :rows, :cols]
    return (quantized.to(torch.float32) * s).to(output_dtype)


def _real_dequantize_one():
    try:
        from transformers.integrations.finegrained_fp8 import Fp8Dequantize
    except Exception:  # noqa: BLE001 - any import failure means "use the formula"
        return None
    return Fp8Dequantize(None)._dequantize_one


def _scale_name(weight_name, raw=None):
    # Fp8Dequantize._scale_pattern_for: x.weight -> x.weight_scale_inv, y -> y_scale_inv.
    # DeepSeek-V4 ships x.scale instead, which FineGrainedFP8HfQuantizer
    # .update_weight_conversions renames ^(.+)\.scale$ -> \1.weight_scale_inv first.
    inv = (weight_name[: -len(".weight")] + ".weight_scale_inv" if weight_name.endswith(".weight")
           else weight_name + "_scale_inv")
    if raw is not None and inv not in raw:
        v4 = (weight_name[: -len(".weight")] if weight_name.endswith(".weight") else weight_name) + ".scale"
        if v4 in raw:
            return v4
    return inv


# Fp8Dequantize._FP4_E2M1_LUT (integrations/finegrained_fp8.py): e2m1 nibble -> value.
_FP4_E2M1_LUT = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def _unpack_fp4(packed):
    """Fp8Dequantize._unpack_fp4's formula (that file needs torch.float8_*):
    two e2m1 values per int8 byte, low nibble first, the last dim doubled."""
    import torch
    lut = torch.tensor(_FP4_E2M1_LUT, dtype=torch.float32)
    u8 = packed.contiguous().view(torch.uint8)
    low = (u8 & 0xF).long()
    high = ((u8 >> 4) & 0xF).long()
    return torch.stack([lut[low], lut[high]], dim=-1).reshape(*packed.shape[:-1], 2 * packed.shape[-1])


def _quantized(t):
    """F8_E4M3 weights, and DeepSeek-V4's FP4 experts (I8, two e2m1 per byte)."""
    return t.dtype == "F8_E4M3" or t.dtype == "I8"


def _mxfp4_dequantize(blocks, scales):
    """gpt-oss MXFP4 experts (*_blocks U8 [E, out, in/32, 16], *_scales U8)
    -> float32 [E, in, out], by transformers' own convert_moe_packed_tensors
    (integrations/mxfp4.py), which Mxfp4Dequantize runs when the quantizer
    dequantizes, as it does on a CPU without the triton kernels: bf16 output
    (exact: e2m1 values times powers of two), widened here."""
    import torch
    import transformers.integrations.mxfp4 as mxfp4
    if not isinstance(mxfp4.torch, _TorchIndexInt64):
        mxfp4.torch = _TorchIndexInt64(torch)
    b = torch.from_numpy(np.asarray(blocks).view(np.uint8).copy())
    s = torch.from_numpy(np.asarray(scales).view(np.uint8).copy())
    return mxfp4.convert_moe_packed_tensors(b, s, dtype=torch.bfloat16).float()


class _TorchIndexInt64(types.ModuleType):
    """torch as integrations/mxfp4.py sees it under torch 1.13: the nibbles
    it turns into lookup indices with .to(torch.int) become int64 (torch
    1.13 indexes with int64 only; the values looked up are the same), and
    torch.OutOfMemoryError (torch >= 2.1) is torch.cuda's."""

    def __init__(self, torch):
        super().__init__("torch")
        self._torch = torch
        self.int = torch.int64
        self.OutOfMemoryError = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)

    def __getattr__(self, name):
        return getattr(self._torch, name)


def read_checkpoint(model_dir, num_hidden_layers, ignore_patterns, fp8_mode, block, notes=None, mtp=False):
    """Checkpoint tensors as float32 torch tensors (fp8 dequantized, by
    fp8_mode "config" = fixed `block` tiles or "grid" = transformers' CPU
    Fp8Dequantize; FP4 (I8) unpacked and scaled per scale-grid block, as
    Fp8Dequantize does; integer tensors as int64), MTP layers and keys
    transformers ignores dropped.  With mtp, the other way round: only the
    MTP layers model.layers.N, N >= num_hidden_layers (what MtpModel
    .from_pretrained selects with the class's layer pattern, there
    model.layers.61 for DeepSeek-V3's 61 layers).
    Returns (tensors, dropped names, names where the two fp8 modes differ)."""
    import torch
    raw = st.load_dir(model_dir)
    scale_names = {_scale_name(n, raw) for n, t in raw.items() if _quantized(t)}
    grid = _real_dequantize_one() or _dequantize_grid
    out, dropped, fp8_differ = {}, [], []
    for name, t in raw.items():
        m = re.match(r"model\.layers\.(\d+)\.", name)
        in_mtp = bool(m and int(m.group(1)) >= num_hidden_layers)
        if mtp != in_mtp or (not mtp and any(re.search(p, name) for p in ignore_patterns)):
            dropped.append(name)
            continue
        if name in scale_names:
            continue
        if t.dtype == "U8" and name.endswith("_blocks") and name[:-7] + "_scales" in raw:
            out[name[:-7]] = w = _mxfp4_dequantize(t.raw, raw[name[:-7] + "_scales"].raw)
            if notes is not None:
                import ref_gpt_oss
                own = ref_gpt_oss.mxfp4_dequantize(t.raw, raw[name[:-7] + "_scales"].raw)
                notes.append((name[:-7], bool(np.array_equal(w.double().numpy(), own))))
            continue
        if t.dtype == "U8" and name.endswith("_scales") and name[:-7] + "_blocks" in raw:
            continue
        if _quantized(t):
            sname = _scale_name(name, raw)
            if sname not in raw:
                raise SetupError("%s: quantized tensor %s has no %s" % (model_dir, name, sname))
            s = torch.from_numpy(st.to_f32(raw[sname]).copy())
            if t.dtype == "I8":
                # MXFP4: the block is the scale grid's, [1, 32] (Fp8Dequantize
                # derives it from the shapes; there is no other reading).
                q = _unpack_fp4(torch.from_numpy(np.asarray(t.raw).copy()))
                out[name] = _dequantize_grid(q, s, torch.float32)
                continue
            q = torch.from_numpy(st.e4m3_to_f32(t.raw).copy())
            fixed = _dequantize_blocks(q, s, block, torch.float32)
            try:
                derived = grid(q, s, torch.float32)
            except (SetupError, ValueError) as e:
                derived = e
            if not isinstance(derived, torch.Tensor) or not torch.equal(derived, fixed):
                fp8_differ.append(name)
            if fp8_mode == "grid":
                if not isinstance(derived, torch.Tensor):
                    raise SetupError("%s: %s" % (name, derived))
                out[name] = derived
            else:
                out[name] = fixed
        elif t.dtype in ("I64", "I32", "I16"):
            out[name] = torch.from_numpy(np.asarray(t.raw, dtype=np.int64).copy())
        else:
            out[name] = torch.from_numpy(st.to_f32(t).copy())
    return out, dropped, fp8_differ


# Inkling: the towers' parameters, which the text path never reads, stay at
# their construction values (the checkpoint's model.visual.* / model.audio.*
# are dropped before the mapping instead of being shaped for them).
INKLING_UNUSED = (r"^model\.visual\.", r"^model\.audio\.")
INKLING_TOWERS = ("model.vision_tower.", "model.audio_tower.")


def model_transforms(model, model_type):
    """The conversion mapping from_pretrained applies to MODEL: its class's
    or model_type's rules, then the "legacy" ones (what becomes the model's
    _weight_conversions).  Fresh copies: the transforms keep state."""
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping
    transforms = (get_checkpoint_conversion_mapping(type(model).__name__)
                  or get_checkpoint_conversion_mapping(model_type) or [])
    return list(transforms) + list(get_checkpoint_conversion_mapping("legacy") or [])


def convert_state_dict(tensors, model, transforms, add_prefix=False, ignore_unexpected=(), allow_missing=()):
    """Checkpoint keys -> the model's keys through TRANSFORMS (transformers'
    conversion mapping, as convert_and_load_state_dict_in_model applies it,
    synchronously).  Keys whose new name matches an ignore_unexpected
    pattern are dropped; model keys matching allow_missing may stay unset
    (the caller keeps the model's own).  Returns (state, the transforms used)."""
    from copy import deepcopy

    from transformers.core_model_loading import (WeightConverter, WeightRenaming, dot_natural_key,
                                                 rename_source_key)
    renamings = [t for t in transforms if isinstance(t, WeightRenaming)]
    converters = [t for t in transforms if isinstance(t, WeightConverter)]
    pattern_to_converter = {k: c for c in converters for k in c.source_patterns}
    wanted = model.state_dict()
    pending, unexpected = {}, []
    # add_prefix (deepseek_v4, whose release has no `model.`): rename_source_key
    # adds or strips base_model_prefix against the model's state dict, as
    # convert_and_load_state_dict_in_model calls it.
    prefix = (model.base_model_prefix, wanted) if add_prefix else ()
    for key, tensor in sorted(tensors.items(), key=lambda kv: dot_natural_key(kv[0])):
        renamed, pattern = rename_source_key(key, renamings, converters, *prefix)
        if renamed not in wanted:
            if not any(re.search(p, renamed) for p in ignore_unexpected):
                unexpected.append(key)
            continue
        if pattern is not None:
            mapping = pending.setdefault(renamed, deepcopy(pattern_to_converter[pattern]))
        else:
            mapping = pending.setdefault(renamed, WeightRenaming(key, renamed))
            pattern = key
        mapping.add_tensor(renamed, key, pattern, (lambda t=tensor: t))
    state = {}
    for first_name, mapping in pending.items():
        for target, value in mapping.convert(first_name, model=model, config=model.config).items():
            state[target] = value[0] if isinstance(value, list) else value
    # A tied lm_head is not stored (save_pretrained drops it); it is the embedding.
    if getattr(model.config, "tie_word_embeddings", False) and "lm_head.weight" not in state \
            and "model.embed_tokens.weight" in state:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    for k in wanted:
        if k not in state and any(re.search(p, k) for p in allow_missing):
            state[k] = wanted[k]
    missing = sorted(set(wanted) - set(state))
    extra = sorted(set(state) - set(wanted))
    if unexpected or missing or extra:
        raise SetupError("state dict mismatch: unexpected %s, missing %s, extra %s"
                         % (unexpected[:6], missing[:6], extra[:6]))
    for k, v in state.items():
        if tuple(v.shape) != tuple(wanted[k].shape):
            raise SetupError("%s: checkpoint gives %s, the model wants %s"
                             % (k, list(v.shape), list(wanted[k].shape)))
    used = sorted({type(t).__name__ + ":" + ",".join(t.source_patterns)
                   for t in transforms if t.was_used()} if transforms else [])
    return state, used


def build_model(model_dir, dtype_name, fp8_mode="config"):
    import torch
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg_dict = json.load(f)
    model_type = cfg_dict.get("model_type")
    checkpoint_model_type = model_type
    config_cls, lm_cls, _ = load_family(model_type)
    if model_type == "qwen3_5_moe":
        # The text model of the VLM layout, as Qwen3_5MoeForCausalLM reads it:
        # its config is text_config (model_type qwen3_5_moe_text, whose
        # conversion mapping strips language_model. from the names).
        cfg_dict = dict(cfg_dict["text_config"], tie_word_embeddings=cfg_dict.get("tie_word_embeddings", False))
    config = config_cls.from_dict(cfg_dict)
    model_type = config.model_type
    torch.manual_seed(0)
    model = lm_cls(config)
    ignore = list(getattr(lm_cls, "_keys_to_ignore_on_load_unexpected", None) or [])
    if model_type == "inkling_mm_model":
        ignore += list(INKLING_UNUSED)
    qc = cfg_dict.get("quantization_config") or {}
    block = tuple(qc.get("weight_block_size") or (128, 128))
    mxfp4 = []
    n_layers = config.get_text_config().num_hidden_layers if model_type == "inkling_mm_model" \
        else config.num_hidden_layers
    tensors, dropped, fp8_differ = read_checkpoint(model_dir, n_layers, ignore,
                                                   fp8_mode, block, mxfp4)
    # Inkling: the towers' parameters keep their construction values.
    keep = [r"^" + re.escape(t) for t in INKLING_TOWERS] if model_type == "inkling_mm_model" else []
    state, used = convert_state_dict(tensors, model, model_transforms(model, model_type),
                                     add_prefix=model_type == "deepseek_v4", allow_missing=keep)
    model.load_state_dict(state, strict=True)
    dtype = getattr(torch, dtype_name)
    model = model.to(dtype)
    # from_pretrained(dtype=...) keeps modules in float32 by its dtype plan
    # (PreTrainedModel._get_dtype_plan): _keep_in_fp32_modules at float16
    # only, _keep_in_fp32_modules_strict at float16 and bfloat16.  At the
    # dtypes this tool runs, float32 and float64, nothing stays behind.
    model.eval()
    model.mxfp4_notes = mxfp4
    model.hf_check = {"model_dir": model_dir, "fp8_mode": fp8_mode, "block": block, "n_layers": n_layers,
                      "model_type": model_type, "checkpoint_model_type": checkpoint_model_type,
                      "dtype": dtype}
    return model, config, dropped, used, fp8_differ


# ---------------------------------------------------------------- running


def compare(logits, ref):
    """What a result says of LOGITS [n, vocab] against REF: largest |diff|,
    that over the largest |ref| (rel), the largest of each row's |diff| over
    that row's largest |ref| (row_rel), top-1 agreement.  Non-finite logits
    give None for the differences (np.max would carry a NaN along; JSON has
    no NaN) and finite false."""
    finite = bool(np.isfinite(logits).all())
    diff = np.abs(logits - ref)
    out = {"n": int(ref.shape[0]), "finite": finite,
           "top1": int((logits.argmax(-1) == ref.argmax(-1)).sum()), "max_ref": float(np.abs(ref).max())}
    if finite:
        out.update(max_abs=float(diff.max()), rel=float(diff.max() / np.abs(ref).max()),
                   row_rel=float((diff.max(-1) / np.abs(ref).max(-1)).max()))
    else:
        out.update(max_abs=None, rel=None, row_rel=None)
    return out


def within(c, tol):
    return c["finite"] and c["rel"] <= tol and c["top1"] == c["n"]


def run_fixture(fixtures, name, dtype_name, fp8_mode="config", hidden=False):
    import torch
    model_dir = os.path.join(fixtures, "hf", name)
    with open(os.path.join(fixtures, "ref", name + ".tokens")) as f:
        tokens = [int(x) for x in f.read().strip().split(",")]
    model, config, dropped, used, fp8_differ = build_model(model_dir, dtype_name, fp8_mode)
    ref = np.fromfile(os.path.join(fixtures, "ref", name + ".f32"), dtype="<f4")
    ref = ref.reshape(len(tokens), -1).astype(np.float64)
    mtp_ref = os.path.join(fixtures, "ref", name + ".mtp.f32")
    layer_out = []
    hooks = []
    if hidden:
        # Inkling's residual stream starts after embed_norm (as ref_inkling dumps it)
        lm = getattr(model.model, "language_model", model.model)
        first = lm.embed_norm if config.model_type == "inkling_mm_model" else lm.embed_tokens
        hooks.append(first.register_forward_hook(
            lambda m, i, o: layer_out.append(o[0].double().numpy().copy())))
        for layer in lm.layers:
            hooks.append(layer.register_forward_hook(
                lambda m, i, o: layer_out.append((o[0] if isinstance(o, tuple) else o)[0].double().numpy().copy())))
    # output_hidden_states as MTPCandidateGenerator asks for it: the MTP
    # head reads hidden_states[-1], the final-normed last hidden state.
    want_states = os.path.exists(mtp_ref) and not hidden
    with torch.no_grad():
        out = model(input_ids=torch.tensor([tokens]), use_cache=False, output_hidden_states=want_states)
    for h in hooks:
        h.remove()
    logits = out.logits[0].double().numpy()
    if logits.shape != ref.shape:
        raise SetupError("%s: logits %s, reference %s" % (name, logits.shape, ref.shape))
    res = {
        "name": name, "dtype": dtype_name, "model_type": config.model_type,
        "checkpoint_model_type": model.hf_check["checkpoint_model_type"],
        "causal_lm": type(model).__name__, "n_tokens": len(tokens),
        "logits": compare(logits, ref),
        "dropped": len(dropped), "mapping": used, "fp8_differ": fp8_differ,
        "mxfp4": model.mxfp4_notes,
    }
    if not hidden:
        res["mtp"] = run_mtp(model, tokens, out.hidden_states[-1] if want_states else None, mtp_ref)
    if hidden:
        res["hidden"] = layer_out
        res["tokens"] = tokens
    return res


# ---------------------------------------------------------------- MTP heads


def _mtp_layers_in(model_dir, n_layers):
    """The MTP tensors a checkpoint holds: model.layers.N with N >=
    num_hidden_layers (DeepSeek, GLM) or an mtp.* / model.mtp.* block
    (DeepSeek-V4, Qwen3.5, Qwen3-Next, Inkling)."""
    names = []
    for name in st.load_dir(model_dir):
        m = re.match(r"model\.layers\.(\d+)\.", name)
        if (m and int(m.group(1)) >= n_layers) or re.match(r"^(model\.)?mtp\.", name):
            names.append(name)
    return names


def run_mtp(model, tokens, last_hidden, mtp_ref):
    """The first MTP head through transformers' own MtpModel
    (modeling_layers.py, what generate(use_mtp=True) drafts with), teacher
    forced, against ref/<name>.mtp.f32; or why there is no comparison.
    Returns the result's "mtp" object: status is "compared",
    "compared_with_override" (MtpModel as built cannot hold the
    checkpoint's MTP layer, see below), "not_in_transformers" or
    "no_reference", with the reason in words."""
    import torch
    from transformers.modeling_layers import MtpModel
    from transformers.core_model_loading import WeightRenaming
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping
    info = model.hf_check
    config = model.config
    text = config.get_text_config()
    n_layers = info["n_layers"]
    ckpt_mtp = _mtp_layers_in(info["model_dir"], n_layers)
    n_mtp = getattr(text, "num_mtp_layers", None)
    ignored = list(getattr(type(model), "_keys_to_ignore_on_load_unexpected", None) or [])
    out = {"checkpoint_mtp_tensors": len(ckpt_mtp), "transformers_num_mtp_layers": n_mtp}
    if not os.path.exists(mtp_ref):
        what = ("the checkpoint holds no MTP layer" if not ckpt_mtp else
                "the checkpoint's %d MTP tensors (e.g. %s) have no reference: make_fixtures.sh writes no "
                "ref/<name>.mtp.f32 for this fixture" % (len(ckpt_mtp), sorted(ckpt_mtp)[0]))
        out.update(status="no_reference", reason=what)
        return out
    if n_mtp is None:
        out.update(status="not_in_transformers", reason=(
            "transformers %s's %s has no num_mtp_layers, so MtpModel (config.get_mtp_config) and "
            "generate(use_mtp=True) refuse the model, and %s drops the MTP weights at load "
            "(_keys_to_ignore_on_load_unexpected %s): no transformers code runs this head"
            % (VERIFIED_VERSION, type(text).__name__, type(model).__name__, ignored)))
        return out
    # MtpModel.from_pretrained's mapping: layers.N. -> layers.(N - num_hidden_layers).mtp_block.,
    # then the "MtpModel" rules, then the main model's own conversions.
    def transforms():
        t = [WeightRenaming(source_patterns="layers.%d." % k, target_patterns="layers.%d.mtp_block." % (k - n_layers))
             for k in range(n_layers, n_layers + n_mtp)]
        return t + list(get_checkpoint_conversion_mapping("MtpModel") or []) + \
            model_transforms(model, info["model_type"])
    tensors, _, _ = read_checkpoint(info["model_dir"], n_layers, [], info["fp8_mode"], info["block"], mtp=True)

    def build(override):
        if override:
            # Construction only: the MTP config says its block is not among
            # the first first_k_dense_replace layers, as the checkpoint's
            # layer num_hidden_layers is not.
            orig = config.get_mtp_config

            def get_mtp_config():
                c = orig()
                c.first_k_dense_replace = 0
                return c
            config.get_mtp_config = get_mtp_config
        try:
            torch.manual_seed(0)
            mtp = MtpModel(model, n_mtp)
        finally:
            if override:
                del config.get_mtp_config
        state, used = convert_state_dict(tensors, mtp, transforms(),
                                         ignore_unexpected=MtpModel._keys_to_ignore_on_load_unexpected,
                                         allow_missing=[r"^embed_tokens\.weight$", r"^shared_head\.weight$"])
        mtp.load_state_dict(state, strict=True)
        mtp.tie_with_main_model(model)
        return mtp.to(info["dtype"]).eval(), used

    try:
        mtp, used = build(False)
        out["status"] = "compared"
    except SetupError as e:
        block = MtpModel(model, n_mtp).layers[0].mtp_block
        k = getattr(text, "first_k_dense_replace", None)
        out["as_built"] = ("MtpModel(main_model, %d) builds its block as %s(config, layer_idx=0) with a %s, "
                           "which cannot hold the checkpoint's MTP layer %d: %s"
                           % (n_mtp, type(block).__name__, type(block.mlp).__name__, n_layers, e))
        if not k:
            out.update(status="transformers_cannot_load", reason=out["as_built"])
            return out
        try:
            mtp, used = build(True)
        except SetupError as e2:
            out.update(status="transformers_cannot_load",
                       reason=out["as_built"] + "; with first_k_dense_replace 0 too: %s" % e2)
            return out
        out["status"] = "compared_with_override"
        out["override"] = ("the MTP config's first_k_dense_replace %d -> 0 while MtpModel is built, so that its "
                           "block (layer_idx 0) gets the %s the checkpoint's layer %d has; a construction "
                           "fix only: the forward is MtpModel's" % (k, type(mtp.layers[0].mtp_block.mlp).__name__,
                                                                    n_layers))
    out["mapping"] = used
    # Teacher forced as MTPCandidateGenerator feeds it after a prefill of
    # tokens 0..n-1: MTP row t gets token t+1 (position t+1) and the main
    # model's hidden_states[-1] at t; row t predicts token t+2.  MtpModel
    # .forward projects only its last row to logits, so a hook takes the
    # first MtpLayer's output for every row and the model's own
    # _project_to_logits makes them logits.  The reference numbers the MTP
    # rows 0..n-2 instead; RoPE is relative, so only rounding differs.
    n = len(tokens)
    rows = []
    hook = mtp.layers[0].register_forward_hook(lambda m, i, o: rows.append(o))
    with torch.no_grad():
        mtp(input_ids=torch.tensor([tokens[1:]]), last_hidden_states=last_hidden[:, :n - 1],
            attention_mask=torch.ones(1, n - 1, dtype=torch.long), position_ids=torch.arange(1, n).unsqueeze(0),
            mtp_cache=None, logits_processor=lambda ids, scores: scores, full_input_ids=torch.tensor([tokens]))
        logits = mtp._project_to_logits(rows[0])[0].double().numpy()
    hook.remove()
    ref = np.fromfile(mtp_ref, dtype="<f4").astype(np.float64).reshape(n - 1, -1)
    if logits.shape != ref.shape:
        raise SetupError("MTP logits %s, reference %s" % (logits.shape, ref.shape))
    out["logits"] = compare(logits, ref)
    return out


def report_layers(args, name):
    """Prints, per layer, the largest difference between transformers' residual
    stream and the numpy reference's (reference.py --dump-hidden)."""
    import subprocess
    import tempfile
    r = run_fixture(args.fixtures, name, args.dtype, args.fp8, hidden=True)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, name + ".f32")
        cmd = [sys.executable, "-B", os.path.join(args.ref_tools, "reference.py"),
               "--model", os.path.join(args.fixtures, "hf", name),
               "--tokens", ",".join(map(str, r["tokens"])), "--out", out,
               "--dump-hidden", "--quiet", "--min-margin", "0"]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            print("%-24s layers: reference.py failed: %s" % ("", (p.stderr or p.stdout).strip()[-300:]))
            return
        ref = np.fromfile(out + ".hidden.f32", dtype="<f4").astype(np.float64)
    hf = r["hidden"]
    ref = ref.reshape(len(hf), len(r["tokens"]), -1)
    for i, (a, b) in enumerate(zip(hf, ref)):
        # deepseek_v4's residual is hc_mult streams [S, hc, H] (the reference
        # dumps them flat); its embedding output is one stream, expanded.
        a = np.asarray(a).reshape(b.shape[0], -1)
        if a.shape[1] != b.shape[1] and b.shape[1] % a.shape[1] == 0:
            a = np.tile(a, b.shape[1] // a.shape[1])
        d = np.abs(a - b).max() / np.abs(b).max()
        label = "embeddings" if i == 0 else "layer %d" % (i - 1)
        print("%-24s   %-11s max|diff| / max|ref| %.3e" % ("", label, d))


# ---------------------------------------------------------------- results


def fixture_files(fixtures, name):
    """The files a result is made from, relative to FIXTURES, in the order
    the identity hashes them: the checkpoint's config.json and every
    *.safetensors (sorted bytewise, as LC_ALL=C globbing sorts them), the
    tokens, the reference logits and, where the fixture has one, the MTP
    reference."""
    hf = os.path.join("hf", name)
    files = [os.path.join(hf, "config.json")]
    files += sorted(os.path.join(hf, f) for f in os.listdir(os.path.join(fixtures, hf)) if f.endswith(".safetensors"))
    files += [os.path.join("ref", name + ".tokens"), os.path.join("ref", name + ".f32")]
    if os.path.exists(os.path.join(fixtures, "ref", name + ".mtp.f32")):
        files.append(os.path.join("ref", name + ".mtp.f32"))
    return files


def fixture_identity(fixtures, name):
    """(sha256 of what `cd FIXTURES && sha256sum FILES` prints, {file: sha256}):
    tests/test_references.c recomputes the first with sha256sum to tell
    whether a committed result was made from the current fixture generator."""
    import hashlib
    per_file, listing = {}, ""
    for rel in fixture_files(fixtures, name):
        h = hashlib.sha256()
        with open(os.path.join(fixtures, rel), "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        per_file[rel] = h.hexdigest()
        listing += "%s  %s\n" % (per_file[rel], rel)
    return hashlib.sha256(listing.encode()).hexdigest(), per_file


def transformers_identity(src, commit=None):
    """The transformers tree a run used: its commit (given, else git's if SRC
    is in a checkout), and a sha256 over the source files this process
    loaded from it (path and contents, sorted by path)."""
    import hashlib
    import subprocess
    pkg = os.path.realpath(os.path.join(src, "transformers"))
    if not commit:
        try:
            commit = subprocess.run(["git", "-C", src, "rev-parse", "HEAD"], capture_output=True, text=True,
                                    check=True).stdout.strip() or None
        except (OSError, subprocess.CalledProcessError):
            commit = None
    files = sorted({os.path.relpath(os.path.realpath(m.__file__), pkg) for m in list(sys.modules.values())
                    if getattr(m, "__file__", None) and os.path.realpath(m.__file__).startswith(pkg + os.sep)})
    h = hashlib.sha256()
    for rel in files:
        with open(os.path.join(pkg, rel), "rb") as f:
            h.update(rel.encode() + b"\0" + f.read() + b"\0")
    return commit, h.hexdigest(), len(files)


def host_cpu():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def write_result(path, r, args, tf, torch, argv):
    """DIR/<fixture>.json: one fixture's result, self-describing (see the
    module docstring, "Results")."""
    import datetime
    import shlex
    commit, files_sha, n_files = transformers_identity(args.transformers, args.transformers_commit)
    sha, per_file = fixture_identity(args.fixtures, r["name"])
    doc = {
        "fixture": r["name"],
        "model_type": r.get("checkpoint_model_type"),
        "transformers_model_type": r.get("model_type"),
        "transformers_class": r.get("causal_lm"),
        "transformers": {"version": tf.__version__, "commit": commit, "source_files": n_files,
                         "source_sha256": files_sha},
        "torch": torch.__version__,
        "dtype": args.dtype,
        "fp8": args.fp8,
        "bound": {"rel": args.tol, "top1": "all"},
        "n_tokens": r.get("n_tokens"),
        "logits": r.get("logits"),
        "mtp": r.get("mtp"),
        "notes": r.get("notes", []),
        "pass": r["pass"],
        "error": r.get("error"),
        "fixture_sha256": sha,
        "fixture_files": per_file,
        "command": " ".join(shlex.quote(a) for a in ["/usr/bin/python3"] + argv),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host_cpu": host_cpu(),
    }
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def _fmt(x):
    return "-" if x is None else "%.3e" % x


def main(argv=None):
    argv_used = list(sys.argv if argv is None else [sys.argv[0]] + list(argv))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transformers", required=True, help="the src/ folder of a transformers v5.15.0 checkout")
    ap.add_argument("--fixtures", required=True, help="the fixtures folder (hf/ and ref/ inside)")
    ap.add_argument("--names", default="",
                    help="comma-separated fixture names (default: every folder under FIXTURES/hf)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    ap.add_argument("--fp8", default="config", choices=("config", "grid"),
                    help="fp8 block scales: config = quantization_config.weight_block_size tiles, the last "
                         "ones partial (DeepSeek's format; default); grid = transformers' CPU "
                         "Fp8Dequantize, block = shape / scale grid")
    ap.add_argument("--tol", type=float, default=1e-5, help="largest |diff| / largest |ref| allowed")
    ap.add_argument("--json-dir", help="write DIR/<fixture>.json, one result per fixture")
    ap.add_argument("--transformers-commit",
                    help="the commit of the --transformers tree, for the results (default: git rev-parse there)")
    ap.add_argument("--layers", action="store_true",
                    help="on a failing fixture, find the first layer that diverges (runs reference.py --dump-hidden)")
    ap.add_argument("--ref-tools", default=HERE, help="folder with the reference.py for --layers")
    ap.add_argument("--float64-casts", action="store_true",
                    help="diagnostic, with --dtype float64: the modeling files' own float32 casts become "
                         "float64 too (changes transformers' arithmetic; see WIDEN_CASTS)")
    ap.add_argument("--any-version", action="store_true", help="run on a transformers other than %s" % VERIFIED_VERSION)
    args = ap.parse_args(argv)
    if args.float64_casts:
        if args.dtype != "float64":
            ap.error("--float64-casts needs --dtype float64")
        global WIDEN_CASTS
        WIDEN_CASTS = True
    try:
        tf = install_shim(args.transformers, args.any_version)
    except SetupError as e:
        print("hf_check: %s" % e, file=sys.stderr)
        return 2
    import torch
    print("hf_check: transformers %s from %s, torch %s, %s%s, tol %.0e"
          % (tf.__version__, args.transformers, torch.__version__, args.dtype,
             " (float32 casts widened: a diagnostic)" if args.float64_casts else "", args.tol))
    if args.names:
        names = [n for n in args.names.split(",") if n]
    else:
        hf = os.path.join(args.fixtures, "hf")
        names = sorted(n for n in os.listdir(hf) if os.path.isdir(os.path.join(hf, n))) if os.path.isdir(hf) else []
    missing = [n for n in names if not os.path.isdir(os.path.join(args.fixtures, "hf", n))
               or not os.path.exists(os.path.join(args.fixtures, "ref", n + ".f32"))]
    if missing or not names:
        print("hf_check: fixtures missing in %s: %s (run tools/make_fixtures.sh)"
              % (args.fixtures, ", ".join(missing) or "all"), file=sys.stderr)
        return 2
    if args.json_dir:
        os.makedirs(args.json_dir, exist_ok=True)
    failed = 0
    for name in names:
        try:
            r = run_fixture(args.fixtures, name, args.dtype, args.fp8)
        except SetupError as e:
            print("%-24s ERROR %s" % (name, e))
            r = {"name": name, "pass": False, "error": str(e)}
            failed += 1
            if args.json_dir:
                write_result(os.path.join(args.json_dir, name + ".json"), r, args, tf, torch, argv_used)
            continue
        c = r["logits"]
        ok = within(c, args.tol)
        notes = []
        print("%-24s %-12s %s max|diff| %s  rel %s  row rel %s  top1 %d/%d  %s"
              % (name, r["model_type"], args.dtype, _fmt(c["max_abs"]), _fmt(c["rel"]), _fmt(c["row_rel"]),
                 c["top1"], c["n"], "ok" if ok else "FAIL"))
        if r["fp8_differ"]:
            notes.append("transformers' Fp8Dequantize (block = shape / scale grid) differs from the "
                         "fixed-block reading on %d tensors, e.g. %s (--fp8 %s used)"
                         % (len(r["fp8_differ"]), r["fp8_differ"][0], args.fp8))
        if r["mxfp4"]:
            same = sum(1 for _, eq in r["mxfp4"] if eq)
            notes.append("%d MXFP4 expert tensors dequantized by transformers' convert_moe_packed_tensors; "
                         "ref_gpt_oss.mxfp4_dequantize gives identical values on %d of them"
                         % (len(r["mxfp4"]), same))
            if same != len(r["mxfp4"]):
                ok = False
        m = r["mtp"]
        if "logits" in m:
            mok = within(m["logits"], args.tol)
            ok = ok and mok
            mc = m["logits"]
            print("%-24s MTP %-22s max|diff| %s  rel %s  row rel %s  top1 %d/%d  %s"
                  % ("", m["status"], _fmt(mc["max_abs"]), _fmt(mc["rel"]), _fmt(mc["row_rel"]),
                     mc["top1"], mc["n"], "ok" if mok else "FAIL"))
            if m.get("override"):
                print("%-24s note: MTP: %s; compared with %s" % ("", m["as_built"], m["override"]))
        elif m["status"] != "no_reference" or m["checkpoint_mtp_tensors"]:
            print("%-24s note: MTP %s: %s" % ("", m["status"], m["reason"]))
        for note in notes:
            print("%-24s note: %s" % ("", note))
        r["notes"] = notes
        r["pass"] = ok
        if args.json_dir:
            write_result(os.path.join(args.json_dir, name + ".json"), r, args, tf, torch, argv_used)
        if not ok:
            failed += 1
            if args.layers:
                report_layers(args, name)
    print("hf_check: %d of %d fixtures outside tolerance" % (failed, len(names)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
