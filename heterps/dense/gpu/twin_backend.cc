// The device segment built for the host twin: g++, Thrust's OpenMP backend.
#include "heterps/dense/gpu/device_segment.inl"
