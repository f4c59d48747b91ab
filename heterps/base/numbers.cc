#include "heterps/base/numbers.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace heterps::base {
namespace {

constexpr double kHuge = 1e15;  // past it, digits stop meaning anything to a reader

std::string NonFinite(double value) {
  if (std::isnan(value)) return "nan";
  return value > 0 ? "inf" : "-inf";
}

}  // namespace

std::string WithCommas(double value) {
  if (!std::isfinite(value)) return NonFinite(value);
  if (std::fabs(value) >= kHuge) return absl::StrFormat("%.3g", value);
  const std::string digits = absl::StrFormat("%.0f", std::fabs(value));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return value < 0 && digits != "0" ? "-" + out : out;
}

std::string HumanNumber(double value) {
  if (!std::isfinite(value) || std::fabs(value) >= 999.5) return WithCommas(value);
  return absl::StrFormat("%.3g", value);
}

std::string HumanUsd(double usd) {
  if (!std::isfinite(usd)) return "$" + NonFinite(usd);
  if (usd == 0) return "$0.00";
  if (std::fabs(usd) < 1) {
    // Three significant digits in fixed notation: $0.0123, $0.0000510 (never 5.1e-05).
    const int digits = std::min(12, 2 - static_cast<int>(std::floor(std::log10(std::fabs(usd)))));
    return absl::StrFormat("%s$%.*f", usd < 0 ? "-" : "", digits, std::fabs(usd));
  }
  const double cents = std::round(std::fabs(usd) * 100);
  return absl::StrFormat("%s$%s.%02d", usd < 0 ? "-" : "", WithCommas(std::floor(cents / 100)),
                         static_cast<int>(std::fmod(cents, 100)));
}

}  // namespace heterps::base
