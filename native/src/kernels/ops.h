// The elementwise op codes, named as UnaryOp / BinaryOp in
// sdk/tensor/backend/interface.ts, and their parsing from JS strings
// (JS thread). Shared by elementwise.cc and the vector math in vmath.h.
#pragma once
#include <cstring>
#include <string>

namespace tprpc {
namespace kern {

enum class UOp : int {
  Neg, Exp, Log, Sqrt, Rsqrt, Abs, Sign, Tanh, Sigmoid, Relu, Gelu, GeluTanh, GeluGrad, GeluTanhGrad,
  Erf, Sin, Cos, Reciprocal, Square, Log1p, Expm1, Floor, Ceil, Round, LogicalNot, Clamp, PowScalar, Isnan,
  Count
};

enum class BOp : int {
  Add, Sub, Mul, Div, Pow, Maximum, Minimum, Eq, Ne, Lt, Le, Gt, Ge, LogicalAnd, LogicalOr, Count
};

constexpr const char* kUnaryNames[] = {
    "neg", "exp", "log", "sqrt", "rsqrt", "abs", "sign", "tanh", "sigmoid", "relu", "gelu", "geluTanh", "geluGrad",
    "geluTanhGrad", "erf", "sin", "cos", "reciprocal", "square", "log1p", "expm1", "floor", "ceil", "round",
    "logicalNot", "clamp", "powScalar", "isnan"};
constexpr const char* kBinaryNames[] = {"add", "sub",     "mul", "div", "pow", "maximum", "minimum",   "eq",
                                        "ne",  "lt",      "le",  "gt",  "ge",  "logicalAnd", "logicalOr"};
static_assert(sizeof(kUnaryNames) / sizeof(kUnaryNames[0]) == static_cast<int>(UOp::Count), "unary names");
static_assert(sizeof(kBinaryNames) / sizeof(kBinaryNames[0]) == static_cast<int>(BOp::Count), "binary names");

// Returns false for an unknown name.
inline bool ParseUOp(const std::string& s, UOp* op) {
  for (int i = 0; i < static_cast<int>(UOp::Count); ++i)
    if (s == kUnaryNames[i]) return *op = static_cast<UOp>(i), true;
  return false;
}

inline bool ParseBOp(const std::string& s, BOp* op) {
  for (int i = 0; i < static_cast<int>(BOp::Count); ++i)
    if (s == kBinaryNames[i]) return *op = static_cast<BOp>(i), true;
  return false;
}

// Ops whose result is bool (uint8 0/1), whatever the input dtype.
inline bool IsPredicate(BOp op) { return op >= BOp::Eq; }
inline bool IsPredicate(UOp op) { return op == UOp::LogicalNot || op == UOp::Isnan; }

}  // namespace kern
}  // namespace tprpc
