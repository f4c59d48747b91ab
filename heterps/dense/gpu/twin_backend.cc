// The device chain built for the host twin: g++, Thrust's OpenMP backend.
#include "heterps/dense/gpu/device_chain.inl"

namespace heterps::dense::twin {

EigenLayout EigenLayoutOfTarget() {
  return {EIGEN_DEFAULT_ALIGN_BYTES, EIGEN_MAX_STATIC_ALIGN_BYTES};
}

}  // namespace heterps::dense::twin
