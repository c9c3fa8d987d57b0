# NCCL backend tests. unit: CPU-only (error mapping, watchdog policy, Unavailable path);
# gpu: skip with a reason when no device, else conformance at world size 1, streams, abort.
if(TARGET commkit::comm_nccl)
  commkit_add_test(comm_nccl_unit_test
    SOURCES nccl_error_test.cc nccl_watchdog_test.cc nccl_unavailable_test.cc
    LIBS commkit::comm_nccl commkit::comm
    LABELS unit
    TIMEOUT 60)
  if(COMMKIT_NCCL_HAS_BACKEND AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/nccl_gpu_test.cc)
    commkit_add_test(comm_nccl_gpu_test
      SOURCES nccl_gpu_test.cc
      LIBS commkit::comm_nccl commkit::comm NCCL::nccl CUDA::cudart_static
      LABELS gpu
      TIMEOUT 300
      RESOURCE_LOCK gpu)
  endif()
endif()
