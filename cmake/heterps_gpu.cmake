# GPU code, built twice (docs/gpu.md): for CUDA GPUs where the CUDA toolkit is found, and always
# for the host twin, from the same sources.
#
#   HETERPS_CUDA=AUTO (default)  build the CUDA sources where CMake finds nvcc
#   HETERPS_CUDA=ON              require the toolkit
#   HETERPS_CUDA=OFF             the host twin only
set(HETERPS_CUDA AUTO CACHE STRING "Build the CUDA sources: AUTO, ON or OFF")
set_property(CACHE HETERPS_CUDA PROPERTY STRINGS AUTO ON OFF)

set(HETERPS_WITH_CUDA OFF)
if(NOT HETERPS_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # H100 (sm_90) and A100 (sm_80) machine code, and PTX for what comes after.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES "80-real;90-real;90-virtual")
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(HETERPS_WITH_CUDA ON)
  elseif(HETERPS_CUDA STREQUAL "ON")
    message(FATAL_ERROR "HETERPS_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "heterps: CUDA sources ${HETERPS_WITH_CUDA}")

# Thrust and CUB for the host twin: the CUDA toolkit's CCCL where there is one, else Debian's
# libthrust-dev and libcub-dev.
find_path(HETERPS_THRUST_INCLUDE_DIR thrust/version.h
  HINTS ${CUDAToolkit_INCLUDE_DIRS}/cccl /usr/local/cuda/include/cccl)
if(NOT HETERPS_THRUST_INCLUDE_DIR)
  message(FATAL_ERROR "Thrust not found: install libthrust-dev (scripts/deps.sh does)")
endif()
find_package(OpenMP REQUIRED COMPONENTS CXX)

# heterps_twin_sources(TARGET target): the target's C++ sources may include Thrust and run its
# OpenMP backend (the host twin's "device").
function(heterps_twin_sources)
  cmake_parse_arguments(ARG "" "TARGET" "" ${ARGN})
  target_include_directories(${ARG_TARGET} SYSTEM PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:${HETERPS_THRUST_INCLUDE_DIR}>)
  target_compile_definitions(${ARG_TARGET} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:THRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_OMP>
    $<$<COMPILE_LANGUAGE:CXX>:THRUST_HOST_SYSTEM=THRUST_HOST_SYSTEM_CPP>)
  target_link_libraries(${ARG_TARGET} PUBLIC OpenMP::OpenMP_CXX)
  if(HETERPS_SANITIZE)
    # Thrust's sequential radix sort binds a reference through a null execution-policy pointer
    # that it never reads (thrust/detail/reference.h, assign_from): UBSan's null-reference check
    # is off for the sources that include Thrust; every other check, and ASan, stay on.
    target_compile_options(${ARG_TARGET} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize=null>)
  endif()
endfunction()
