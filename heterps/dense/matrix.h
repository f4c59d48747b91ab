// The host matrices of the dense layers: row-major, one sample per row.
#pragma once

#include "Eigen/Core"

namespace heterps::dense {

template <typename T>
using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

}  // namespace heterps::dense
