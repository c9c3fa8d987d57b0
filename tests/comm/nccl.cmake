# NCCL backend tests. unit: CPU-only (error mapping, watchdog policy, Unavailable path);
# gpu: skip with a reason when no device, else conformance at world size 1, streams, abort.
if(TARGET commkit::comm_nccl)
  commkit_add_test(comm_nccl_unit_test
    SOURCES nccl_error_test.cc nccl_watchdog_test.cc nccl_unavailable_test.cc nccl_collectives_test.cc
      nccl_fingerprint_test.cc
    LIBS commkit::comm_nccl commkit::comm
    LABELS unit
    TIMEOUT 60)
  # nccl_collectives_test uses the backend's internal header (no NCCL calls are made).
  target_include_directories(comm_nccl_unit_test PRIVATE ${PROJECT_SOURCE_DIR}/comm/backends/nccl/src)
  # Engine-level GPU tests use the backend's internal headers (src/).
  commkit_add_test(comm_nccl_engine_gpu_test
    SOURCES nccl_engine_gpu_test.cc
    LIBS commkit::comm_nccl NCCL::nccl CUDA::cudart_static
    LABELS gpu
    TIMEOUT 300
    RESOURCE_LOCK gpu)
  target_include_directories(comm_nccl_engine_gpu_test PRIVATE ${PROJECT_SOURCE_DIR}/comm/backends/nccl/src)
  if(COMMKIT_NCCL_HAS_BACKEND AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/nccl_backend_gpu_test.cc)
    commkit_add_test(comm_nccl_backend_gpu_test
      SOURCES nccl_backend_gpu_test.cc nccl_conformance_gpu_test.cc
      LIBS commkit::comm_nccl commkit::comm CUDA::cudart_static
      LABELS gpu
      TIMEOUT 300
      RESOURCE_LOCK gpu)
    target_include_directories(comm_nccl_backend_gpu_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  endif()
endif()
