// Tests of the .npy reader and writer (common/src/npy.cpp).

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "mls/common/error.hpp"
#include "mls/common/npy.hpp"
#include "mls/testing.hpp"

namespace {

using mls::DType;
using mls::NpyArray;

std::vector<std::byte> to_bytes(const std::string& s) {
  std::vector<std::byte> b(s.size());
  if (!s.empty()) std::memcpy(b.data(), s.data(), s.size());
  return b;
}

template <class T>
NpyArray make_array(const mls::Shape& shape, const std::vector<T>& values, bool fortran = false) {
  NpyArray a;
  a.dtype = mls::dtype_v<T>;
  a.shape = shape;
  a.fortran_order = fortran;
  a.data.resize(values.size() * sizeof(T));
  for (std::size_t i = 0; i < values.size(); ++i) {
    const T v = values[i];  // element by element: std::vector<bool> has no data()
    std::memcpy(a.data.data() + i * sizeof(T), &v, sizeof(T));
  }
  return a;
}

/// A version 1.0 file with `header` (padded like NumPy to a multiple of 64) and `data`.
std::string npy_file(const std::string& dict, const std::string& data = "", int major = 1) {
  const std::size_t prefix = major == 1 ? 10 : 12;
  std::string header = dict;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string s = "\x93NUMPY";
  s += static_cast<char>(major);
  s += '\0';
  const std::size_t n = header.size();
  s += static_cast<char>(n & 0xff);
  s += static_cast<char>((n >> 8) & 0xff);
  if (major != 1) {
    s += static_cast<char>((n >> 16) & 0xff);
    s += static_cast<char>((n >> 24) & 0xff);
  }
  return s + header + data;
}

NpyArray parse(const std::string& s) { return mls::parse_npy(to_bytes(s)); }

void check_same(const NpyArray& a, const NpyArray& b) {
  CHECK(a.dtype == b.dtype);
  CHECK(a.shape == b.shape);
  CHECK(a.fortran_order == b.fortran_order);
  CHECK(a.data == b.data);
}

using mls::testing::TempDir;

}  // namespace

TEST_CASE("npy: round trip for every dtype", "[common][npy]") {
  const std::vector<NpyArray> arrays = {
      make_array<bool>({2, 2}, {true, false, false, true}),
      make_array<std::int32_t>({3}, {-1, 0, 2147483647}),
      make_array<std::int64_t>({2, 1}, {-9000000000LL, 42}),
      make_array<float>({2, 3}, {0.5f, -1.f, 3.25f, 1e-30f, 1e30f, -0.f}),
      make_array<double>({1, 2}, {3.141592653589793, -2.5e-300}),
  };
  for (const auto& a : arrays) {
    INFO("dtype " << a.dtype);
    const auto bytes = mls::serialize_npy(a);
    CHECK(bytes.size() % 64 == a.data.size() % 64);  // the header is 64-byte aligned
    check_same(mls::parse_npy(bytes), a);
  }
}

TEST_CASE("npy: round trip of 0-d, 1-d, 3-d, empty and Fortran-order arrays", "[common][npy]") {
  const std::vector<NpyArray> arrays = {
      make_array<double>({}, {2.5}),                               // 0-d
      make_array<std::int64_t>({5}, {1, 2, 3, 4, 5}),              // 1-d
      make_array<float>({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8}),      // 3-d
      make_array<float>({0, 3}, {}),                               // empty
      make_array<std::int32_t>({4, 0, 123456789}, {}),             // empty, huge other dim
      make_array<std::int32_t>({2, 3}, {0, 3, 1, 4, 2, 5}, true),  // Fortran order
  };
  for (const auto& a : arrays) {
    INFO("shape " << mls::shape_str(a.shape));
    check_same(mls::parse_npy(mls::serialize_npy(a)), a);
  }
}

TEST_CASE("npy: byte-exact match with NumPy for arange(6, f4).reshape(2, 3)", "[common][npy]") {
  // np.save(f, np.arange(6, dtype='<f4').reshape(2, 3)) writes a 128-byte header (10 bytes of
  // magic, version and length, then the dict padded with spaces and ended by '\n'), then the data.
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  std::string expected = std::string("\x93NUMPY\x01\x00", 8) + "\x76" + std::string(1, '\0') + dict;
  expected += std::string(127 - expected.size(), ' ') + "\n";
  REQUIRE(expected.size() == 128);
  const float values[6] = {0, 1, 2, 3, 4, 5};
  expected.append(reinterpret_cast<const char*>(values), sizeof values);  // little-endian host

  const auto a = make_array<float>({2, 3}, {0, 1, 2, 3, 4, 5});
  CHECK(mls::serialize_npy(a) == to_bytes(expected));
  check_same(parse(expected), a);
}

TEST_CASE("npy: headers of other shapes match NumPy's", "[common][npy]") {
  // What np.save writes (numpy 1.24): 21 digits are reserved for the growth axis, then padding.
  auto header_of = [](const NpyArray& a) {
    const auto b = mls::serialize_npy(a);
    const std::string s(reinterpret_cast<const char*>(b.data()), b.size());
    return s.substr(10, s.find('\n') - 10);
  };
  auto padded = [](std::string d) { return d + std::string(117 - d.size(), ' '); };
  CHECK(header_of(make_array<double>({}, {0.0})) ==
        padded("{'descr': '<f8', 'fortran_order': False, 'shape': (), }"));
  CHECK(header_of(make_array<std::int64_t>({5}, {0, 1, 2, 3, 4})) ==
        padded("{'descr': '<i8', 'fortran_order': False, 'shape': (5,), }"));
  CHECK(header_of(make_array<bool>({0, 3}, {})) ==
        padded("{'descr': '|b1', 'fortran_order': False, 'shape': (0, 3), }"));
  CHECK(header_of(make_array<std::int32_t>({2, 3}, {0, 1, 2, 3, 4, 5}, true)) ==
        padded("{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }"));
}

TEST_CASE("npy: version 2.0 and 3.0 headers and a robust dict parser", "[common][npy]") {
  const std::string data(reinterpret_cast<const char*>(std::vector<std::int32_t>{7, 8, 9}.data()),
                         12);
  const auto expected = make_array<std::int32_t>({3}, {7, 8, 9});
  SECTION("version 2.0") {
    check_same(
        parse(npy_file("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", data, 2)),
        expected);
  }
  SECTION("version 3.0") {
    check_same(
        parse(npy_file("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", data, 3)),
        expected);
  }
  SECTION("keys in any order, double quotes, odd spacing, no trailing comma") {
    check_same(
        parse(npy_file("{ \"shape\" :(3 ,),\"fortran_order\":False ,'descr':\"<i4\"}", data)),
        expected);
  }
  SECTION("Python 2 long suffix and a 1-tuple without comma") {
    check_same(parse(npy_file("{'descr': '<i4', 'fortran_order': False, 'shape': (3L), }", data)),
               expected);
  }
  SECTION("header not aligned and ended by spaces only") {
    std::string s = std::string("\x93NUMPY\x01\x00", 8);
    const std::string dict = "{'descr':'<i4','fortran_order':False,'shape':(3,)}  ";
    s += static_cast<char>(dict.size());
    s += '\0';
    check_same(parse(s + dict + data), expected);
  }
  SECTION("bool spelled '<b1'") {
    const auto a = parse(npy_file("{'descr': '<b1', 'fortran_order': False, 'shape': (2,), }",
                                  std::string("\x01\x00", 2)));
    CHECK(a.dtype == DType::Bool);
    CHECK(a.data.size() == 2);
  }
}

TEST_CASE("npy: serialize switches to version 2.0 for a header over 64 KiB", "[common][npy]") {
  NpyArray a;
  a.dtype = DType::Float32;
  a.shape.assign(25000, 1);  // "1, " per dimension: a header of about 75 KB
  a.data.resize(4);
  const auto b = mls::serialize_npy(a);
  REQUIRE(b.size() > 12);
  CHECK(std::to_integer<int>(b[6]) == 2);
  CHECK(std::to_integer<int>(b[7]) == 0);
  const std::size_t hlen =
      std::to_integer<std::size_t>(b[8]) | std::to_integer<std::size_t>(b[9]) << 8 |
      std::to_integer<std::size_t>(b[10]) << 16 | std::to_integer<std::size_t>(b[11]) << 24;
  CHECK(hlen > 65535);
  CHECK((12 + hlen) % 64 == 0);
  CHECK(b.size() == 12 + hlen + 4);
  // ... which this reader refuses, as it is over kMaxNpyHeader.
  CHECK_THROWS_WITH(mls::parse_npy(b), Catch::Contains("exceeds the limit of 65536"));
}

TEST_CASE("npy: bad input is refused with a clear error", "[common][npy]") {
  const std::string ok_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  const std::string data24(24, '\0');
  using Catch::Contains;

  SECTION("empty and truncated magic") {
    CHECK_THROWS_WITH(parse(""), Contains("npy: truncated file: 0 bytes"));
    CHECK_THROWS_WITH(parse("\x93NUM"), Contains("npy: truncated file: 4 bytes"));
    CHECK_THROWS_WITH(parse("\x93NUMPY\x01"), Contains("npy: truncated file"));
  }
  SECTION("bad magic") {
    CHECK_THROWS_WITH(parse("PK\x03\x04 this is a zip"),
                      Contains("npy: bad magic string (not a .npy file)"));
    CHECK_THROWS_WITH(parse("\x93NUMPZ\x01\x00"), Contains("npy: bad magic string"));
    CHECK_THROWS_WITH(parse("x"), Contains("npy: bad magic string"));
  }
  SECTION("unsupported version") {
    std::string s = npy_file(ok_dict, data24);
    s[6] = '\x04';
    CHECK_THROWS_WITH(parse(s), Contains("npy: unsupported format version 4.0"));
    s[6] = '\x01';
    s[7] = '\x01';
    CHECK_THROWS_WITH(parse(s), Contains("npy: unsupported format version 1.1"));
  }
  SECTION("truncated header length and header") {
    CHECK_THROWS_WITH(parse(std::string("\x93NUMPY\x01\x00\x76", 9)),
                      Contains("npy: truncated file: 9 bytes"));
    CHECK_THROWS_WITH(parse(std::string("\x93NUMPY\x02\x00\x76\x00\x00", 11)),
                      Contains("npy: truncated file"));
    const std::string s = npy_file(ok_dict, data24);
    CHECK_THROWS_WITH(parse(s.substr(0, 50)),
                      Contains("npy: truncated header: header length says 118 bytes, found 40"));
  }
  SECTION("header length over the limit") {
    // Version 2.0 with a 70000-byte header: refused before anything is read or allocated.
    std::string s = std::string("\x93NUMPY\x02\x00", 8);
    const std::uint32_t n = 70000;
    for (int i = 0; i < 4; ++i) s += static_cast<char>((n >> (8 * i)) & 0xff);
    CHECK_THROWS_WITH(parse(s), Contains("npy: header of 70000 bytes exceeds the limit of 65536"));
  }
  SECTION("header not a dict") {
    CHECK_THROWS_WITH(parse(npy_file("['descr', '<f4']")),
                      Contains("npy: the header is not a Python dict"));
    CHECK_THROWS_WITH(parse(npy_file("")), Contains("npy: the header is not a Python dict"));
    CHECK_THROWS_WITH(parse(npy_file("{'descr': '<f4'")),
                      Contains("npy: bad header: expected ',' or '}'"));
    CHECK_THROWS_WITH(parse(npy_file("{'descr' '<f4'}")),
                      Contains("npy: bad header: expected ':'"));
    CHECK_THROWS_WITH(parse(npy_file("{descr: '<f4'}")),
                      Contains("npy: bad header: expected a quoted key"));
    CHECK_THROWS_WITH(parse(npy_file("{'descr': '<f4}")),
                      Contains("npy: bad header: unterminated string"));
    CHECK_THROWS_WITH(parse(npy_file("{'shape': (2, x)}")),
                      Contains("npy: bad header: expected an integer"));
    CHECK_THROWS_WITH(parse(npy_file("{'shape': (2 3)}")),
                      Contains("npy: bad header: expected ',' or ')'"));
    CHECK_THROWS_WITH(parse(npy_file("{'fortran_order': None}")),
                      Contains("npy: bad header: unsupported value"));
    CHECK_THROWS_WITH(parse(npy_file(ok_dict + " junk", data24)),
                      Contains("npy: bad header: unexpected text after the closing '}'"));
  }
  SECTION("missing, duplicate, unknown and mistyped keys") {
    CHECK_THROWS_WITH(parse(npy_file("{'descr': '<f4', 'shape': (2, 3), }", data24)),
                      Contains("npy: the header has no 'fortran_order' key"));
    CHECK_THROWS_WITH(parse(npy_file("{'fortran_order': False, 'shape': (2, 3), }", data24)),
                      Contains("npy: the header has no 'descr' key"));
    CHECK_THROWS_WITH(parse(npy_file("{'descr': '<f4', 'fortran_order': False}", data24)),
                      Contains("npy: the header has no 'shape' key"));
    CHECK_THROWS_WITH(parse(npy_file("{'descr': '<f4', 'descr': '<f4'}")),
                      Contains("npy: key 'descr' appears twice"));
    CHECK_THROWS_WITH(parse(npy_file("{'descr': '<f4', 'colour': 'red'}")),
                      Contains("npy: unexpected key 'colour'"));
    CHECK_THROWS_WITH(parse(npy_file("{'shape': '2, 3'}")),
                      Contains("npy: 'shape' must be a tuple"));
    CHECK_THROWS_WITH(parse(npy_file("{'fortran_order': 0}")),
                      Contains("npy: bad header: unsupported value"));
    CHECK_THROWS_WITH(parse(npy_file("{'fortran_order': 'no'}")),
                      Contains("npy: 'fortran_order' must be True or False"));
    CHECK_THROWS_WITH(parse(npy_file("{'descr': True}")),
                      Contains("npy: 'descr' must be a string"));
    CHECK_THROWS_WITH(
        parse(npy_file("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}")),
        Contains("structured dtypes are not supported"));
  }
  SECTION("unsupported descr") {
    for (const char* d : {"<u2", "|O", "<c8", "|i1", "<f2", "<U3"}) {
      INFO(d);
      const std::string dict =
          std::string("{'descr': '") + d + "', 'fortran_order': False, 'shape': (1,), }";
      CHECK_THROWS_WITH(parse(npy_file(dict, std::string(8, '\0'))),
                        Contains(std::string("npy: unsupported dtype '") + d + "'") &&
                            Contains("supported: '|b1' (bool), '<i4' (int32)"));
    }
    CHECK_THROWS_WITH(parse(npy_file("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }",
                                     std::string(4, '\0'))),
                      Contains("npy: big-endian dtype '>f4' is not supported"));
  }
  SECTION("negative, overflowing and oversized shapes") {
    CHECK_THROWS_WITH(
        parse(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (3, -1), }")),
        Contains("npy: shape (3, -1) has a negative dimension"));
    CHECK_THROWS_WITH(
        parse(npy_file(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }")),
        Contains("npy: shape [4294967296, 4294967296] has more than 2^63 elements"));
    CHECK_THROWS_WITH(
        parse(npy_file(
            "{'descr': '<f8', 'fortran_order': False, 'shape': (2305843009213693952,), }")),
        Contains("npy: shape (2305843009213693952,) of float64: data size overflows int64"));
    CHECK_THROWS_WITH(
        parse(npy_file(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }")),
        Contains("npy: shape dimension 99999999999999999999 does not fit in 64 bits"));
    CHECK_THROWS_WITH(
        parse(npy_file(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (9223372036854775808,), }")),
        Contains("does not fit in 64 bits"));
    // A huge but representable shape on a tiny file: refused without allocating.
    CHECK_THROWS_WITH(
        parse(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }")),
        Contains("npy: truncated file: header says 4000000000000 bytes of data, found 0"));
  }
  SECTION("data too short, trailing bytes, bad bool values") {
    CHECK_THROWS_WITH(parse(npy_file(ok_dict, std::string(10, '\0'))),
                      Contains("npy: truncated file: header says 24 bytes of data, found 10"));
    CHECK_THROWS_WITH(
        parse(npy_file(ok_dict, std::string(29, '\0'))),
        Contains("npy: 5 trailing bytes after the data (header says 24 bytes of data, found 29)"));
    CHECK_THROWS_WITH(parse(npy_file("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }",
                                     std::string("\x01\x02\x00", 3))),
                      Contains("npy: bool array has byte value 2 at element 1"));
  }
}

TEST_CASE("npy: serialize refuses inconsistent arrays", "[common][npy]") {
  auto a = make_array<float>({2, 3}, {0, 1, 2, 3, 4, 5});
  a.data.pop_back();
  CHECK_THROWS_WITH(mls::serialize_npy(a),
                    Catch::Contains("npy: cannot serialise: shape [2, 3] of float32 needs 24 bytes "
                                    "of data, the array holds 23"));
  a.shape = {2, -3};
  CHECK_THROWS_WITH(mls::serialize_npy(a),
                    Catch::Contains("npy: shape (2, -3) has a negative dimension"));
}

TEST_CASE("npy: write_npy and read_npy through files", "[common][npy]") {
  TempDir dir;
  const std::string path = (dir.path / "x.npy").string();
  const auto a = make_array<double>({2, 2}, {1.0, -2.0, 3.5, 1e100});
  mls::write_npy(path, a);
  check_same(mls::read_npy(path), a);
  // Overwriting works and leaves no temporary file behind.
  const auto b = make_array<std::int64_t>({3}, {1, 2, 3});
  mls::write_npy(path, b);
  check_same(mls::read_npy(path), b);
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path),
                      std::filesystem::directory_iterator{}) == 1);

  SECTION("a missing file names the path") {
    const std::string missing = (dir.path / "missing.npy").string();
    CHECK_THROWS_WITH(
        mls::read_npy(missing),
        Catch::Contains("npy: cannot open '" + missing + "'") && Catch::Contains("No such file"));
  }
  SECTION("a directory is not a .npy file") {
    CHECK_THROWS_WITH(mls::read_npy(dir.path.string()), Catch::Contains("is not a regular file"));
  }
  SECTION("bad content names the path") {
    const std::string bad = (dir.path / "bad.npy").string();
    std::ofstream(bad, std::ios::binary) << "not an npy file";
    CHECK_THROWS_WITH(mls::read_npy(bad), Catch::Contains("npy: '" + bad + "': bad magic string"));
  }
  SECTION("an unwritable path names the path") {
    const std::string nowhere = (dir.path / "no" / "such" / "dir.npy").string();
    CHECK_THROWS_WITH(mls::write_npy(nowhere, a),
                      Catch::Contains("npy: cannot write '" + nowhere + "'"));
    auto bad = a;
    bad.data.resize(3);
    CHECK_THROWS_WITH(mls::write_npy(path, bad),
                      Catch::Contains("npy: '" + path + "': cannot serialise"));
  }
}
