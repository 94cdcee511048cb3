#include "mls/common/dtype.hpp"

#include <string>

namespace mls {

DType parse_dtype(std::string_view name) {
  if (name == "bool" || name == "b1") return DType::Bool;
  if (name == "int32" || name == "i32" || name == "i4") return DType::Int32;
  if (name == "int64" || name == "i64" || name == "i8") return DType::Int64;
  if (name == "float32" || name == "f32" || name == "f4" || name == "float") return DType::Float32;
  if (name == "float64" || name == "f64" || name == "f8" || name == "double") return DType::Float64;
  fail("parse_dtype: unknown dtype '", name, "', expected one of bool, int32, int64, float32, float64");
}

}  // namespace mls
