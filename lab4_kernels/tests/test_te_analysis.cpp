// Lab 4 part 2: the small pure helpers of lowering (src/te_internal.hpp): floor division,
// substitution, simplification, affine forms and interval bounds.
#include <catch2/catch.hpp>

#include <optional>
#include <string>

#include "error_check.hpp"
#include "mls/observe.hpp"
#include "te_internal.hpp"

using namespace mls::kernels::te;
namespace d = mls::kernels::te::detail;

TEST_CASE("te analysis: floor division and modulo follow Python", "[te][analysis][base]") {
  for (std::int64_t a = -9; a <= 9; ++a)
    for (std::int64_t b : {-4, -3, -1, 1, 2, 5}) {
      const std::int64_t q = d::floordiv(a, b), r = d::floormod(a, b);
      REQUIRE(q * b + r == a);
      REQUIRE((r == 0 || (r > 0) == (b > 0)));
      REQUIRE((b > 0 ? r < b : r > b));
    }
  REQUIRE(d::floordiv(-7, 2) == -4);
  REQUIRE(d::floormod(-7, 2) == 1);
  LAB4_REQUIRE_ERROR(d::floordiv(3, 0), "integer division by zero (3 // 0)");
  LAB4_REQUIRE_ERROR(d::floormod(3, 0), "integer modulo by zero (3 % 0)");
}

TEST_CASE("te analysis: substitution and simplification", "[te][analysis][base]") {
  Var yo("yo"), yi("yi"), x("x");
  const Expr y = yo * 8 + yi;
  REQUIRE(to_string(d::simplify(y - yo * 8)) == "yi");
  REQUIRE(to_string(d::simplify((x + 0) * 1 + 3 - 3)) == "x");
  REQUIRE(to_string(d::simplify(x * 0 + 2 * (x + 1) - x)) == "x + 2");
  REQUIRE(to_string(d::simplify(Expr(7) / 2 + Expr(-7) % 2)) == "4");
  REQUIRE(to_string(d::simplify(x / 1 + x % 1)) == "x");
  REQUIRE(to_string(d::simplify(Expr(1.5f) * 2.0f)) == "3.0");
  REQUIRE(to_string(d::simplify(-(x - yo))) == "yo - x");
  d::VarMap m{{x.get(), y}};
  REQUIRE(to_string(d::substitute(x * 2 + yi, m)) == "(yo*8 + yi)*2 + yi");
  REQUIRE(to_string(d::simplify(d::substitute(x * 2 + yi, m))) == "yo*16 + yi*3");
  REQUIRE(d::vars_of(x * 2 + yi - x).size() == 2);
  REQUIRE(d::uses_any(y, {yi.get()}));
  REQUIRE_FALSE(d::uses_any(y, {x.get()}));
}

TEST_CASE("te analysis: affine forms keep non-affine parts as atoms", "[te][analysis][base]") {
  Var a("a"), b("b");
  const d::Affine f = d::to_affine(a * 3 - (b - 2) * 2 + a * b + (a / 4) + (a / 4) * 2);
  REQUIRE(f.constant == 4);
  REQUIRE(f.terms.size() == 4);  // a, b, a*b, a // 4
  REQUIRE(f.terms[0].var == a.get());
  REQUIRE(f.terms[0].coeff == 3);
  REQUIRE(f.terms[1].coeff == -2);
  REQUIRE(f.terms[2].var == nullptr);
  REQUIRE(f.terms[3].coeff == 3);
  REQUIRE(to_string(d::from_affine(f)) == "a*3 - b*2 + a*b + a // 4*3 + 4");
  REQUIRE(d::structural_key(a / 4) == d::structural_key(a / 4));
  REQUIRE(d::structural_key(a) != d::structural_key(Expr(Var("a"))));
}

TEST_CASE("te analysis: interval bounds", "[te][analysis][base]") {
  Var i("i"), j("j");
  const d::Ranges r{{i.get(), {0, 7}}, {j.get(), {0, 3}}};
  // Each bound observed as "[lo, hi]" (or "none") for mls-grader.
  auto seen = [&](const char* what, const std::optional<d::Interval>& b) {
    mls::testing::observe(std::string("bound(") + what + ")",
                          b ? "[" + std::to_string(b->lo) + ", " + std::to_string(b->hi) + "]" : std::string("none"));
  };
  seen("i*4 + j", d::bound(i * 4 + j, r));
  seen("i - j*2", d::bound(i - j * 2, r));
  seen("(j + 8) % 16", d::bound((j + 8) % 16, r));
  seen("i // j", d::bound(i / j, r));
  auto b = d::bound(i * 4 + j, r);
  REQUIRE((b && b->lo == 0 && b->hi == 31));
  b = d::bound(i - j * 2, r);
  REQUIRE((b && b->lo == -6 && b->hi == 7));
  b = d::bound(i / 3, r);
  REQUIRE((b && b->lo == 0 && b->hi == 2));
  b = d::bound(i % 5, r);
  REQUIRE((b && b->lo == 0 && b->hi == 4));
  b = d::bound((j + 8) % 16, r);
  REQUIRE((b && b->lo == 8 && b->hi == 11));
  b = d::bound(min(i, j + 1) - max(i, 2), r);
  REQUIRE((b && b->lo == -7 && b->hi == 2));
  REQUIRE_FALSE(d::bound(i + Var("free"), r));
  REQUIRE_FALSE(d::bound(i / j, r));
}
