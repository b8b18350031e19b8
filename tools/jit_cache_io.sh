# Sourced by tools/gpu_run.sh: the kernel cache ($DG_JIT_CACHE_DIR) in and out of a GPU run.
#   jit_cache_unpack        before the first kernel: the entries of .jit-prebuilt/kernels.tar.gz (copied to the GPU machine with the tree; built on a
#                           CPU machine by tools/prebuild_jit_cache.py) into the cache, so matching kernels load
#                           instead of compiling; prints how many
#   jit_cache_sources FILE  the rendered source of every entry in the cache (<family>-<compiler>-<key>/kernel.cu), as
#                           a tarball: tools/prebuild_jit_cache.py's input for the next run
jit_cache_unpack() {
    local tarball=.jit-prebuilt/kernels.tar.gz
    [[ -f $tarball ]] || return 0
    mkdir -p "$DG_JIT_CACHE_DIR/kernels"
    tar xzf "$tarball" -C "$DG_JIT_CACHE_DIR/kernels" &&
        echo "prebuilt kernel cache: $(tar tzf "$tarball" | grep -c '/manifest$') entries from $tarball"
}
jit_cache_sources() {
    local kernels=$DG_JIT_CACHE_DIR/kernels dest
    dest=$(realpath -m "$1")  # (the tarball is written from inside the cache folder)
    [[ -d $kernels ]] || return 0
    (cd "$kernels" && find . -mindepth 2 -maxdepth 2 -name kernel.cu -print0 | tar czf "$dest" --null -T -)
}
