// Reading and writing NumPy .npy files.
//
// Format (numpy/lib/format.py, NEP 1):
//   "\x93NUMPY" major minor
//   header length: uint16 LE (version 1.0) or uint32 LE (2.0, 3.0)
//   header: a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
//           padded with spaces and ended by '\n' so that the data starts on a 64-byte boundary
//   data:   numel * itemsize raw bytes, C or Fortran order
//
// The header is parsed by hand (a tiny subset of Python literals), and every size is checked
// against the buffer before anything is allocated, so no input can crash, hang, over-allocate
// or read out of bounds.
#include "mls/common/npy.hpp"

#include <cstring>
#include <limits>
#include <optional>
#include <string_view>

#include "mls/common/error.hpp"
#include "mls/common/file.hpp"

namespace mls {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicLen = 6;
constexpr std::size_t kAlign = 64;
/// NumPy leaves room for the growth axis to reach this many digits (numpy >= 1.17).
constexpr std::size_t kGrowthAxisMaxDigits = 21;
constexpr const char* kSupported =
    "'|b1' (bool), '<i4' (int32), '<i8' (int64), '<f4' (float32), '<f8' (float64)";

/// The shape as Python writes a tuple: "()", "(5,)", "(2, 3)".
std::string tuple_str(const Shape& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

std::string_view descr_of(DType t) {
  switch (t) {
    case DType::Bool:
      return "|b1";
    case DType::Int32:
      return "<i4";
    case DType::Int64:
      return "<i8";
    case DType::Float32:
      return "<f4";
    case DType::Float64:
      return "<f8";
  }
  fail("npy: unknown dtype ", static_cast<int>(t));
}

DType dtype_from_descr(std::string_view d) {
  if (d == "|b1" || d == "<b1" || d == "b1" || d == "?" || d == "|?") return DType::Bool;
  if (d == "<i4") return DType::Int32;
  if (d == "<i8") return DType::Int64;
  if (d == "<f4") return DType::Float32;
  if (d == "<f8") return DType::Float64;
  if (!d.empty() && d[0] == '>') {
    fail("npy: big-endian dtype '", d, "' is not supported (supported: ", kSupported, ")");
  }
  fail("npy: unsupported dtype '", d, "' (supported: ", kSupported, ")");
}

/// A printable excerpt of the header for error messages (control bytes shown as '?').
std::string excerpt(std::string_view s) {
  constexpr std::size_t kMax = 80;
  std::string out;
  for (std::size_t i = 0; i < s.size() && i < kMax; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    out += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
  }
  if (s.size() > kMax) out += "...";
  return out;
}

/// One value of the header dict.
struct Value {
  enum Kind { String, Bool, Tuple } kind = String;
  std::string str;
  bool boolean = false;
  Shape tuple;
};

/// Parses the header dict: a tiny subset of Python literals (strings, True/False, tuples of
/// integers), keys in any order, single or double quotes, any whitespace, trailing commas.
class HeaderParser {
 public:
  explicit HeaderParser(std::string_view text) : s_(text) {}

  NpyArray parse() {
    std::optional<std::string> descr;
    std::optional<bool> fortran;
    std::optional<Shape> shape;
    skip_ws();
    if (!eat('{')) not_a_dict();
    for (;;) {
      skip_ws();
      if (eat('}')) break;
      if (at_end()) not_a_dict();
      if (peek() != '\'' && peek() != '"') {
        error("expected a quoted key at offset ", pos_);
      }
      const std::string key = parse_string();
      skip_ws();
      if (!eat(':')) error("expected ':' after key '", key, "' at offset ", pos_);
      skip_ws();
      Value v = parse_value(key);
      if (key == "descr") {
        MLS_CHECK(!descr, "npy: key 'descr' appears twice in the header");
        MLS_CHECK(
            v.kind == Value::String,
            "npy: 'descr' must be a string such as '<f4' (structured dtypes are not supported)");
        descr = v.str;
      } else if (key == "fortran_order") {
        MLS_CHECK(!fortran, "npy: key 'fortran_order' appears twice in the header");
        MLS_CHECK(v.kind == Value::Bool, "npy: 'fortran_order' must be True or False");
        fortran = v.boolean;
      } else if (key == "shape") {
        MLS_CHECK(!shape, "npy: key 'shape' appears twice in the header");
        MLS_CHECK(v.kind == Value::Tuple,
                  "npy: 'shape' must be a tuple of integers such as (2, 3)");
        shape = std::move(v.tuple);
      } else {
        fail("npy: unexpected key '", excerpt(key),
             "' in the header (expected 'descr', 'fortran_order' and 'shape')");
      }
      skip_ws();
      if (eat(',')) continue;
      skip_ws();
      if (eat('}')) break;
      error("expected ',' or '}' at offset ", pos_);
    }
    // After the dict: only the padding (spaces and the final newline).
    skip_ws();
    if (!at_end()) error("unexpected text after the closing '}' at offset ", pos_);
    MLS_CHECK(descr, "npy: the header has no 'descr' key (header: ", excerpt(s_), ")");
    MLS_CHECK(fortran, "npy: the header has no 'fortran_order' key (header: ", excerpt(s_), ")");
    MLS_CHECK(shape, "npy: the header has no 'shape' key (header: ", excerpt(s_), ")");
    NpyArray a;
    a.dtype = dtype_from_descr(*descr);
    a.fortran_order = *fortran;
    a.shape = std::move(*shape);
    return a;
  }

 private:
  template <class... Args>
  [[noreturn]] void error(Args&&... args) const {
    fail("npy: bad header: ", std::forward<Args>(args)..., " (header: ", excerpt(s_), ")");
  }
  [[noreturn]] void not_a_dict() const {
    fail("npy: the header is not a Python dict literal (header: ", excerpt(s_), ")");
  }

  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[pos_]; }
  bool eat(char c) {
    if (peek() != c || at_end()) return false;
    ++pos_;
    return true;
  }
  void skip_ws() {
    while (!at_end() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool eat_word(std::string_view w) {
    if (s_.substr(pos_, w.size()) != w) return false;
    pos_ += w.size();
    return true;
  }

  std::string parse_string() {
    const char quote = s_[pos_++];
    std::string out;
    for (;;) {
      if (at_end()) error("unterminated string");
      const char c = s_[pos_++];
      if (c == quote) return out;
      if (c == '\\') {
        if (at_end()) error("unterminated string");
        out += s_[pos_++];
        continue;
      }
      out += c;
    }
  }

  /// An integer with an optional sign and Python 2's 'L' suffix; overflow is an error.
  std::int64_t parse_int() {
    bool neg = false;
    if (eat('-')) {
      neg = true;
    } else {
      eat('+');
    }
    if (at_end() || s_[pos_] < '0' || s_[pos_] > '9') error("expected an integer at offset ", pos_);
    const std::size_t start = pos_;
    std::uint64_t v = 0;
    constexpr std::uint64_t kLimit = std::uint64_t{1} << 63;  // |INT64_MIN|
    while (!at_end() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      const unsigned digit = static_cast<unsigned>(s_[pos_] - '0');
      if (v > (kLimit - digit) / 10) {
        while (!at_end() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
        fail("npy: shape dimension ", neg ? "-" : "", s_.substr(start, pos_ - start),
             " does not fit in 64 bits");
      }
      v = v * 10 + digit;
      ++pos_;
    }
    if (!at_end() && (s_[pos_] == 'L' || s_[pos_] == 'l')) ++pos_;
    if (neg)
      return v == kLimit ? std::numeric_limits<std::int64_t>::min() : -static_cast<std::int64_t>(v);
    if (v == kLimit) {
      fail("npy: shape dimension ", s_.substr(start, pos_ - start), " does not fit in 64 bits");
    }
    return static_cast<std::int64_t>(v);
  }

  Value parse_value(const std::string& key) {
    Value v;
    if (peek() == '\'' || peek() == '"') {
      v.kind = Value::String;
      v.str = parse_string();
    } else if (eat_word("True")) {
      v.kind = Value::Bool;
      v.boolean = true;
    } else if (eat_word("False")) {
      v.kind = Value::Bool;
      v.boolean = false;
    } else if (eat('(')) {
      v.kind = Value::Tuple;
      skip_ws();
      while (!eat(')')) {
        v.tuple.push_back(parse_int());
        skip_ws();
        if (eat(',')) {
          skip_ws();
          continue;
        }
        if (eat(')')) break;
        error("expected ',' or ')' in the tuple of '", key, "' at offset ", pos_);
      }
    } else if (peek() == '[') {
      fail("npy: '", excerpt(key),
           "' is a list: structured dtypes are not supported (supported: ", kSupported, ")");
    } else {
      error("unsupported value for key '", excerpt(key), "' at offset ", pos_);
    }
    return v;
  }

  std::string_view s_;
  std::size_t pos_ = 0;
};

std::uint32_t read_le(const std::byte* p, std::size_t n) {
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < n; ++i)
    v |= std::uint32_t{std::to_integer<std::uint8_t>(p[i])} << (8 * i);
  return v;
}

/// Bytes of data the array's shape and dtype call for, with overflow and sign checks.
std::int64_t data_bytes(const Shape& shape, DType dtype) {
  for (std::int64_t d : shape) {
    MLS_CHECK(d >= 0, "npy: shape ", tuple_str(shape), " has a negative dimension");
  }
  const std::int64_t numel = checked_numel(shape, "npy");
  const auto isz = static_cast<std::int64_t>(itemsize(dtype));
  MLS_CHECK(numel <= std::numeric_limits<std::int64_t>::max() / isz, "npy: shape ",
            tuple_str(shape), " of ", dtype_name(dtype), ": data size overflows int64 (", numel,
            " elements of ", isz, " bytes)");
  return numel * isz;
}

}  // namespace

NpyArray parse_npy(std::span<const std::byte> bytes) {
  const std::size_t size = bytes.size();
  const auto* p = bytes.data();
  // Magic string: a prefix that does not match is "not a .npy file", a matching one that stops
  // early is a truncated file.
  for (std::size_t i = 0; i < kMagicLen && i < size; ++i) {
    MLS_CHECK(std::to_integer<unsigned char>(p[i]) == static_cast<unsigned char>(kMagic[i]),
              "npy: bad magic string (not a .npy file)");
  }
  MLS_CHECK(size >= kMagicLen + 2, "npy: truncated file: ", size,
            " bytes, too short for the magic string and version (8 bytes)");
  const unsigned major = std::to_integer<unsigned>(p[6]);
  const unsigned minor = std::to_integer<unsigned>(p[7]);
  MLS_CHECK((major == 1 || major == 2 || major == 3) && minor == 0,
            "npy: unsupported format version ", major, ".", minor, " (supported: 1.0, 2.0, 3.0)");
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  const std::size_t prefix = kMagicLen + 2 + len_bytes;
  MLS_CHECK(size >= prefix, "npy: truncated file: ", size,
            " bytes, too short for the header length of a version ", major, ".0 file (", prefix,
            " bytes)");
  const std::size_t header_len = read_le(p + 8, len_bytes);
  MLS_CHECK(header_len <= kMaxNpyHeader, "npy: header of ", header_len,
            " bytes exceeds the limit of ", kMaxNpyHeader);
  MLS_CHECK(size - prefix >= header_len, "npy: truncated header: header length says ", header_len,
            " bytes, found ", size - prefix);
  const std::string_view header(reinterpret_cast<const char*>(p + prefix), header_len);

  NpyArray a = HeaderParser(header).parse();
  const std::int64_t nbytes = data_bytes(a.shape, a.dtype);
  const std::size_t offset = prefix + header_len;
  const std::size_t found = size - offset;
  MLS_CHECK(static_cast<std::uint64_t>(nbytes) <= found, "npy: truncated file: header says ",
            nbytes, " bytes of data, found ", found);
  MLS_CHECK(static_cast<std::uint64_t>(nbytes) == found,
            "npy: ", found - static_cast<std::size_t>(nbytes),
            " trailing bytes after the data (header says ", nbytes, " bytes of data, found ", found,
            ")");
  const auto* data = p + offset;
  if (a.dtype == DType::Bool) {
    // A bool byte other than 0 or 1 would be undefined behaviour when read as a C++ bool.
    for (std::size_t i = 0; i < found; ++i) {
      const unsigned b = std::to_integer<unsigned>(data[i]);
      MLS_CHECK(b <= 1, "npy: bool array has byte value ", b, " at element ", i,
                " (expected 0 or 1)");
    }
  }
  a.data.assign(data, data + found);
  return a;
}

std::vector<std::byte> serialize_npy(const NpyArray& array) {
  const std::string_view descr = descr_of(array.dtype);
  const std::int64_t nbytes = data_bytes(array.shape, array.dtype);
  MLS_CHECK(static_cast<std::uint64_t>(nbytes) == array.data.size(),
            "npy: cannot serialise: shape ", shape_str(array.shape), " of ",
            dtype_name(array.dtype), " needs ", nbytes, " bytes of data, the array holds ",
            array.data.size());

  // Exactly what NumPy writes: keys sorted, a trailing ", " before '}', room for the growth axis
  // to reach 21 digits, then spaces and '\n' up to a multiple of 64 bytes.
  std::string header = "{'descr': '";
  header += descr;
  header += "', 'fortran_order': ";
  header += array.fortran_order ? "True" : "False";
  header += ", 'shape': ";
  header += tuple_str(array.shape);
  header += ", }";
  if (!array.shape.empty()) {
    const std::int64_t growth = array.fortran_order ? array.shape.back() : array.shape.front();
    const std::size_t digits = std::to_string(growth).size();
    if (digits < kGrowthAxisMaxDigits) header.append(kGrowthAxisMaxDigits - digits, ' ');
  }
  std::size_t hlen = header.size() + 1;  // + '\n'
  std::size_t len_bytes = 2;
  unsigned major = 1;
  std::size_t pad = kAlign - (kMagicLen + 2 + len_bytes + hlen) % kAlign;
  if (hlen + pad > 0xffff) {
    len_bytes = 4;
    major = 2;
    pad = kAlign - (kMagicLen + 2 + len_bytes + hlen) % kAlign;
  }
  MLS_CHECK(hlen + pad <= 0xffffffffu, "npy: cannot serialise: header of ", hlen + pad,
            " bytes is too large");
  header.append(pad, ' ');
  header += '\n';
  hlen = header.size();

  std::vector<std::byte> out;
  out.reserve(kMagicLen + 2 + len_bytes + hlen + array.data.size());
  for (std::size_t i = 0; i < kMagicLen; ++i) out.push_back(static_cast<std::byte>(kMagic[i]));
  out.push_back(static_cast<std::byte>(major));
  out.push_back(std::byte{0});
  for (std::size_t i = 0; i < len_bytes; ++i)
    out.push_back(static_cast<std::byte>((hlen >> (8 * i)) & 0xff));
  for (char c : header) out.push_back(static_cast<std::byte>(c));
  out.insert(out.end(), array.data.begin(), array.data.end());
  return out;
}

NpyArray read_npy(const std::string& path) {
  const std::string file = read_file(path, "npy");
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(file.data()), file.size());
  try {
    return parse_npy(bytes);
  } catch (const Error& e) {
    std::string_view msg = e.what();
    if (msg.starts_with("npy: ")) msg.remove_prefix(5);
    fail("npy: '", path, "': ", msg);
  }
}

void write_npy(const std::string& path, const NpyArray& array) {
  std::vector<std::byte> bytes;
  try {
    bytes = serialize_npy(array);
  } catch (const Error& e) {
    std::string_view msg = e.what();
    if (msg.starts_with("npy: ")) msg.remove_prefix(5);
    fail("npy: '", path, "': ", msg);
  }
  write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), "npy");
}

}  // namespace mls
