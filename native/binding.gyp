{
  # The tprpc addon. One target; sources are listed explicitly (gyp does not glob).
  # BLAS: Debian's static OpenBLAS (libopenblas-pthread-dev, built with DYNAMIC_ARCH, so one
  # binary picks the right kernels at run time) is linked in, keeping the prebuild self-contained.
  "variables": {
    "openblas_dir%": "/usr/lib/x86_64-linux-gnu/openblas-pthread",
    "openblas_inc%": "/usr/include/x86_64-linux-gnu/openblas-pthread"
  },
  "targets": [
    {
      "target_name": "tprpc",
      "sources": [
        "src/addon.cc",
        "src/view.cc",
        "src/errors.cc",
        "src/dynlib.cc",
        "src/memory.cc",
        "src/thread_pool.cc",
        "src/kernels/elementwise.cc",
        "src/kernels/reduce.cc",
        "src/kernels/matmul.cc",
        "src/kernels/softmax.cc",
        "src/kernels/indexing.cc",
        "src/kernels/copy.cc",
        "src/kernels/fused.cc",
        "src/channels/common.cc",
        "src/channels/shm/ring.cc",
        "src/channels/shm/landing.cc",
        "src/channels/shm/handshake.cc",
        "src/channels/shm/core.cc",
        "src/channels/shm/binding.cc",
        "src/channels/shared.cc",
        "src/channels/host_region.cc",
        "src/channels/sched.cc",
        "src/channels/cma.cc",
        "src/channels/ucx_api.cc",
        "src/channels/ucx/core.cc",
        "src/channels/ucx/binding.cc",
        "src/channels/register.cc",
        "src/gpu/gpu.cc",
        "src/gpu/caching_allocator.cc",
        "src/gpu/host_allocator.cc",
        "src/gpu/cuda_memory.cc",
        "src/gpu/block_tracker.cc",
        "src/gpu/cuda_ipc.cc",
        "src/gpu/nccl.cc",
        "src/cuda/host_kernels.cc",
        "src/cuda/launcher.cc",
        "src/cuda/driver_launcher.cc",
        "src/cuda/ops.cc",
        "src/cuda/binding.cc"
      ],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")", "src", "gen", "<(openblas_inc)"],
      "defines": ["NAPI_VERSION=8", "NODE_ADDON_API_DISABLE_DEPRECATED", "NAPI_CPP_EXCEPTIONS"],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions", "-std=gnu++14", "-std=gnu++17"],
      "cflags_cc": ["-std=c++17", "-O3", "-fexceptions", "-fvisibility=hidden"],
      # NB: -fno-math-errno: no kernel reads errno, and with it std::sqrt in a loop (Adam's) vectorizes
      # (with errno, each element is a scalar sqrt and a branch to libm for negative inputs).
      # -ffp-contract=off: no a * b + c fused into one FMA behind the code's back (C++'s default is
      # "fast"), so the fused optimizer steps stay bit-identical to the tensor ops on any target
      # (TPRPC_AVX2_CLONES, an -march=native build); vmath's FMAs are explicit intrinsics.
      "cflags": ["-O3", "-fno-math-errno", "-ffp-contract=off"],
      # NB: the C++ runtime is linked statically too, so the prebuild loads on any glibc >= 2.34
      # system whatever its libstdc++ (ldd: libc, libm and the loader only).
      "ldflags": ["-static-libstdc++", "-static-libgcc"],
      "libraries": [
        "<(openblas_dir)/libopenblas.a",
        "-lpthread",
        "-ldl",
        "-Wl,--exclude-libs,ALL",
        "-Wl,--gc-sections"
      ]
    }
  ]
}
