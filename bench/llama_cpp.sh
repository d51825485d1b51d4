# Sourced by the benchmark scripts that compare colibri with llama.cpp:
# where the llama.cpp binaries are, built the way the comparison needs.
#
# The peer is upstream llama.cpp at commit 81ff7abe5 (81ff7abe50b9...,
# "hexagon: new vtcm layouts ...", build number 9928). Its source comes from
# the fetched mirror, whose HEAD carries extra fork commits, so take exactly
# that commit (the mirror lacks the blobs of the models/ggml-vocab-*.gguf
# test vocabularies; they are not needed, and an exclude pathspec does not
# keep git archive from failing on them, so take every top-level entry but
# models/):
#
#   r=/work/.mirror/kainlan+llama.cpp-intel-optimizations/repo
#   mkdir -p /work/llama.cpp-81ff7abe5
#   git -C $r archive 81ff7abe5 $(git -C $r ls-tree --name-only 81ff7abe5 | grep -vx models) |
#       tar -x -C /work/llama.cpp-81ff7abe5
#
# and build it CPU-only, the instruction sets named explicitly (no
# -march=native: a host reporting AMX may fault on its instructions), with
# nothing that needs the network (no UI download, no HTTPS):
#
#   cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
#     -DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_BMI2=ON \
#     -DGGML_FMA=ON -DGGML_F16C=ON $(llama_cpp_isa_flags) \
#     -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
#     -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_SYCL=OFF -DGGML_METAL=OFF -DGGML_BLAS=OFF \
#     -DGGML_OPENMP=ON -DGGML_CCACHE=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
#     -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF \
#     -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON \
#     -DLLAMA_BUILD_COMMIT=81ff7abe5 -DLLAMA_BUILD_NUMBER=9928
#   cmake --build build -j 2 --target llama-bench llama-completion llama-quantize
#
# where llama_cpp_isa_flags turns each of GGML_AVX_VNNI, GGML_AVX512,
# GGML_AVX512_VBMI, GGML_AVX512_VNNI and GGML_AVX512_BF16 on exactly when
# /proc/cpuinfo lists it (GGML_AVX512 needs avx512f, avx512bw, avx512dq,
# avx512vl and avx512cd; the others need it too, but AVX_VNNI, the VEX
# form, only AVX2): the comparison is against llama.cpp at its best on this
# host, and its Q4_0/Q8_0 dot products take VNNI when compiled for it. On a
# Sapphire Rapids host: -DGGML_AVX_VNNI=ON -DGGML_AVX512=ON
# -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON. The
# switches the build was made with are in build/CMakeCache.txt;
# llama_cpp_find prints them (llama_cpp_built_flags). LLAMA_CURL is gone at
# this commit, replaced by LLAMA_OPENSSL; llama-cli needs the server build,
# and llama-completion is the non-interactive one. About ten minutes on two
# cores.
#
# llama_cpp_find sets
#   llama_bin   a directory holding llama-bench and llama-completion:
#               $LLAMA_CPP_DIR/build/bin when $LLAMA_CPP_DIR is a source tree
#               (built first, as above, if it has no build yet), or
#               $LLAMA_CPP_DIR itself when it holds the binaries;
#   llama_flags the GGML_* instruction-set switches of that build, from the
#               CMakeCache.txt beside it ("unknown" for bare binaries),
#               also printed on stderr for the benchmark's log, with a
#               warning where they differ from this host's (an old build
#               is used as it is: remove its build/ to rebuild).
# Without $LLAMA_CPP_DIR, or when the build fails, it prints the reason on
# stderr and returns 1; callers skip the llama.cpp runs with that reason.
# Needs cmake, ninja and a C++17 compiler only for the build.

llama_cpp_say() { echo "bench: llama.cpp: $*" >&2; }

# The -DGGML_AVX_VNNI/-DGGML_AVX512*=ON/OFF switches for this host, from the
# flags of /proc/cpuinfo. GGML_AVX512 compiles with -mavx512f -mavx512cd
# -mavx512vl -mavx512dq -mavx512bw, so all five; the AVX-512 extensions
# only with them. AVX-VNNI (the VEX encoding, -mavxvnni) needs only AVX2:
# ggml's 256-bit integer dot products take vpdpbusd in its EVEX form where
# AVX512-VNNI and VL are compiled in, in the VEX form where only AVX-VNNI is.
llama_cpp_cpu_has() {
  case " $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) " in
    *" $1 "*) return 0 ;;
  esac
  return 1
}

llama_cpp_isa_flags() {
  _base=ON; _vbmi=OFF; _vnni=OFF; _bf16=OFF; _avxvnni=OFF
  for _isa in avx512f avx512cd avx512vl avx512dq avx512bw; do
    llama_cpp_cpu_has $_isa || _base=OFF
  done
  if [ "$_base" = ON ]; then
    llama_cpp_cpu_has avx512vbmi && _vbmi=ON
    llama_cpp_cpu_has avx512_vnni && _vnni=ON
    llama_cpp_cpu_has avx512_bf16 && _bf16=ON
  fi
  llama_cpp_cpu_has avx_vnni && llama_cpp_cpu_has avx2 && _avxvnni=ON
  echo "-DGGML_AVX_VNNI=$_avxvnni -DGGML_AVX512=$_base -DGGML_AVX512_VBMI=$_vbmi -DGGML_AVX512_VNNI=$_vnni -DGGML_AVX512_BF16=$_bf16"
}

# The instruction-set switches a build was configured with (its build
# folder's CMakeCache.txt), one line: what the binaries that a benchmark
# ran were compiled for, whoever built them.
llama_cpp_built_flags() {
  _cache=$1/CMakeCache.txt
  [ -f "$_cache" ] || { echo unknown; return 0; }
  sed -n 's/^\(GGML_\(NATIVE\|SSE42\|AVX\|AVX2\|BMI2\|FMA\|F16C\|AVX_VNNI\|AVX512[A-Z0-9_]*\|AMX_[A-Z0-9]*\)\):BOOL=\(.*\)$/\1=\3/p' "$_cache" |
    sort | tr '\n' ' ' | sed 's/ $//'
  echo
}

llama_cpp_build() {
  _src=$1
  for _tool in cmake ninja c++; do
    command -v $_tool >/dev/null 2>&1 || { llama_cpp_say "$_src has no build and $_tool is missing (apt-get install cmake ninja-build g++)"; return 1; }
  done
  _isa_flags=$(llama_cpp_isa_flags)
  llama_cpp_say "building $_src/build (CPU only, AMX off, $_isa_flags; about ten minutes on two cores)"
  # shellcheck disable=SC2086  # the switches split into words
  if ! nice -n 10 cmake -S "$_src" -B "$_src/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_BMI2=ON \
      -DGGML_FMA=ON -DGGML_F16C=ON $_isa_flags \
      -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
      -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_SYCL=OFF -DGGML_METAL=OFF -DGGML_BLAS=OFF \
      -DGGML_OPENMP=ON -DGGML_CCACHE=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF \
      -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON \
      -DLLAMA_BUILD_COMMIT=81ff7abe5 -DLLAMA_BUILD_NUMBER=9928 >&2; then
    llama_cpp_say "configuring $_src failed (see above)"
    return 1
  fi
  if ! nice -n 10 cmake --build "$_src/build" -j 2 --target llama-bench llama-completion llama-quantize >&2; then
    llama_cpp_say "building $_src failed (see above)"
    return 1
  fi
}

llama_cpp_has_bins() {
  [ -x "$1/llama-bench" ] && [ -x "$1/llama-completion" ]
}

# Warns where the build whose llama_cpp_built_flags are $1 differs from
# this host's switches (llama_cpp_isa_flags): a peer compiled for less than
# the host would flatter colibri. Also where it was built native or with
# AMX, whose instructions may fault here.
llama_cpp_check_flags() {
  _miss=
  for _f in $(llama_cpp_isa_flags); do
    _f=${_f#-D}
    case " $1 " in
      *" $_f "*) ;;
      *) _miss="$_miss $_f" ;;
    esac
  done
  [ -z "$_miss" ] || llama_cpp_say "WARNING: built without this host's switches:$_miss (remove its build/ to rebuild)"
  for _f in $1; do
    case $_f in
      GGML_NATIVE=ON | GGML_AMX_*=ON) llama_cpp_say "WARNING: built with $_f" ;;
    esac
  done
}

# shellcheck disable=SC2034  # llama_bin and llama_flags are for the caller
llama_cpp_find() {
  llama_bin='' llama_flags=''
  if [ -z "${LLAMA_CPP_DIR:-}" ]; then
    llama_cpp_say "LLAMA_CPP_DIR is not set (a llama.cpp 81ff7abe5 source tree or a folder of its binaries; see bench/llama_cpp.sh)"
    return 1
  fi
  if [ ! -d "$LLAMA_CPP_DIR" ]; then
    llama_cpp_say "LLAMA_CPP_DIR=$LLAMA_CPP_DIR is not a directory"
    return 1
  fi
  _dir=$(cd "$LLAMA_CPP_DIR" && pwd)
  if llama_cpp_has_bins "$_dir"; then
    llama_bin=$_dir
    llama_flags=$(llama_cpp_built_flags "$_dir/..")  # a build's bin/ folder
    llama_cpp_say "$llama_bin, built with: $llama_flags"
    [ "$llama_flags" = unknown ] || llama_cpp_check_flags "$llama_flags"
    return 0
  fi
  if [ ! -f "$_dir/CMakeLists.txt" ] || [ ! -d "$_dir/ggml" ]; then
    llama_cpp_say "$_dir holds neither llama-bench and llama-completion nor a llama.cpp source tree"
    return 1
  fi
  if ! llama_cpp_has_bins "$_dir/build/bin"; then
    llama_cpp_build "$_dir" || return 1
    llama_cpp_has_bins "$_dir/build/bin" || { llama_cpp_say "the build of $_dir has no build/bin/llama-bench and llama-completion"; return 1; }
  fi
  llama_bin=$_dir/build/bin
  llama_flags=$(llama_cpp_built_flags "$_dir/build")
  llama_cpp_say "$llama_bin, built with: $llama_flags"
  llama_cpp_check_flags "$llama_flags"
}
