// Row gather / scatter / scatter-add against host references: narrow and wide rows, widths that
// are and are not multiples of 4, aligned and misaligned (base + 1) tables and outputs, repeated
// indices, the bf16 table, and scatter_add_rows as the adjoint (backward) of gather_rows; column
// blocks gathered, scattered and expanded between strided rows and a packed block.
#include "support/gpu_test.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <numeric>

#include "gpu/gather.hpp"

namespace foxhunt::gpu {
namespace {

struct Shape3 {
  std::int64_t rows, width, num;  // table (rows, width), packed (num, width)
};
// Widths 1, 3, 7, 1001 take the scalar path; 4, 64, 4096 the float4 path when aligned. The last
// two cases move ~4M elements.
constexpr Shape3 kShapes[] = {{5, 1, 1},       {1000, 1, 4097}, {300, 3, 4097},     {300, 4, 4097},       {97, 7, 1001},
                              {513, 64, 4097}, {50, 1001, 257}, {1100, 4096, 1000}, {1000003, 4, 1000003}};
struct Offsets {
  int table, packed;
};
constexpr Offsets kOffsets[] = {{0, 0}, {1, 1}, {0, 1}, {1, 0}};

std::string trace(const Shape3& s, const Offsets& o) {
  return "rows " + std::to_string(s.rows) + " width " + std::to_string(s.width) + " num " + std::to_string(s.num) +
         " offsets " + std::to_string(o.table) + "/" + std::to_string(o.packed);
}

class GatherTest : public test::GpuTest {
 protected:
  // n poisoned elements at `offset` in a fresh buffer, with a guard element each side.
  template <class T>
  std::pair<DeviceBuffer<T>, T*> blank(std::size_t n, int offset) {
    DeviceBuffer<T> buf(n + offset + 1);
    test::poison(buf, stream());
    T* p = buf.data() + offset;
    return {std::move(buf), p};
  }
  // `host` copied into such a view.
  template <class T>
  std::pair<DeviceBuffer<T>, T*> put(const std::vector<T>& host, int offset) {
    auto v = blank<T>(host.size(), offset);
    if (!host.empty())
      FH_CHECK(cudaMemcpyAsync(v.second, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice, stream()));
    return v;
  }
  ::testing::AssertionResult guards_intact(const DeviceBuffer<float>& buf, std::size_t n, int offset) {
    auto all = test::download(buf, stream());
    auto poisoned = [](float x) { return std::bit_cast<std::uint32_t>(x) == 0xFFFFFFFFu; };
    for (int i = 0; i < offset; ++i)
      if (!poisoned(all[i])) return ::testing::AssertionFailure() << "write before the view";
    if (!poisoned(all[offset + n])) return ::testing::AssertionFailure() << "write past the end";
    return ::testing::AssertionSuccess();
  }
  std::vector<std::int32_t> random_indices(std::int64_t num, std::int64_t rows) {
    std::uniform_int_distribution<std::int32_t> pick(0, static_cast<std::int32_t>(rows - 1));
    std::vector<std::int32_t> idx(num);
    for (auto& i : idx) i = pick(rng());
    if (num > 0) idx.back() = static_cast<std::int32_t>(rows - 1);  // the table's last row too
    return idx;
  }
  std::vector<std::int32_t> distinct_indices(std::int64_t num, std::int64_t rows) {
    std::vector<std::int32_t> all(rows);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng());
    all.resize(num);
    return all;
  }
};

TEST_F(GatherTest, GatherRowsCopiesExactly) {
  SCOPED_TRACE(seed_note());
  for (const auto& s : kShapes)
    for (const auto& o : kOffsets) {
      SCOPED_TRACE(trace(s, o));
      auto table = test::random_uniform(s.rows * s.width, -3.0f, 3.0f, rng());
      auto idx = random_indices(s.num, s.rows);
      auto [tb, t] = put(table, o.table);
      auto d_idx = test::upload(idx, stream());
      auto [ob, out] = blank<float>(s.num * s.width, o.packed);
      gather_rows(out, t, d_idx.data(), s.num, s.width, stream());
      auto got = test::download(out, s.num * s.width, stream());
      std::int64_t wrong = 0;
      for (std::int64_t i = 0; i < s.num; ++i)
        for (std::int64_t c = 0; c < s.width; ++c)
          wrong += std::bit_cast<std::uint32_t>(got[i * s.width + c]) !=
                   std::bit_cast<std::uint32_t>(table[idx[i] * s.width + c]);
      EXPECT_EQ(wrong, 0);
      EXPECT_TRUE(guards_intact(ob, s.num * s.width, o.packed));
    }
}

TEST_F(GatherTest, GatherRowsFromBf16WidensExactly) {
  SCOPED_TRACE(seed_note());
  for (const auto& s : kShapes)
    for (const auto& o : kOffsets) {
      SCOPED_TRACE(trace(s, o));
      // bf16 = the top half of a random float: every value is an exact f32 after widening.
      auto src = test::random_uniform(s.rows * s.width, -3.0f, 3.0f, rng());
      std::vector<__nv_bfloat16> table(src.size());
      for (std::size_t i = 0; i < src.size(); ++i)
        table[i] = std::bit_cast<__nv_bfloat16>(static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(src[i]) >> 16));
      auto idx = random_indices(s.num, s.rows);
      auto [tb, t] = put(table, o.table);
      auto d_idx = test::upload(idx, stream());
      auto [ob, out] = blank<float>(s.num * s.width, o.packed);
      gather_rows(out, t, d_idx.data(), s.num, s.width, stream());
      auto got = test::download(out, s.num * s.width, stream());
      std::int64_t wrong = 0;
      for (std::int64_t i = 0; i < s.num; ++i)
        for (std::int64_t c = 0; c < s.width; ++c)
          wrong += std::bit_cast<std::uint32_t>(got[i * s.width + c]) !=
                   std::uint32_t{std::bit_cast<std::uint16_t>(table[idx[i] * s.width + c])} << 16;
      EXPECT_EQ(wrong, 0);
      EXPECT_TRUE(guards_intact(ob, s.num * s.width, o.packed));
    }
}

TEST_F(GatherTest, ScatterRowsWritesOnlyIndexedRows) {
  SCOPED_TRACE(seed_note());
  for (auto s : kShapes)
    for (const auto& o : kOffsets) {
      s.rows = std::max(s.rows, s.num);  // distinct indices need num <= rows
      SCOPED_TRACE(trace(s, o));
      auto table = test::random_uniform(s.rows * s.width, -3.0f, 3.0f, rng());
      auto rows = test::random_uniform(s.num * s.width, 5.0f, 9.0f, rng());
      auto idx = distinct_indices(s.num, s.rows);
      auto [tb, t] = put(table, o.table);
      auto [rb, r] = put(rows, o.packed);
      auto d_idx = test::upload(idx, stream());
      scatter_rows(t, r, d_idx.data(), s.num, s.width, stream());
      auto want = table;
      for (std::int64_t i = 0; i < s.num; ++i)
        std::copy_n(rows.begin() + i * s.width, s.width, want.begin() + idx[i] * s.width);
      auto got = test::download(t, table.size(), stream());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
      EXPECT_TRUE(guards_intact(tb, table.size(), o.table));
    }
}

TEST_F(GatherTest, ScatterAddRowsAccumulatesDuplicates) {
  SCOPED_TRACE(seed_note());
  for (auto s : kShapes)
    for (const auto& o : kOffsets) {
      s.rows = std::max<std::int64_t>(1, std::min(s.rows, s.num / 8));  // ~8+ hits per table row
      SCOPED_TRACE(trace(s, o));
      auto table = test::random_uniform(s.rows * s.width, -1.0f, 1.0f, rng());
      auto rows = test::random_uniform(s.num * s.width, -1.0f, 1.0f, rng());
      auto idx = random_indices(s.num, s.rows);
      auto [tb, t] = put(table, o.table);
      auto [rb, r] = put(rows, o.packed);
      auto d_idx = test::upload(idx, stream());
      scatter_add_rows(t, r, d_idx.data(), s.num, s.width, stream());

      std::vector<double> want(table.begin(), table.end()), mag(table.size()), hits(s.rows, 1.0);
      for (std::size_t i = 0; i < table.size(); ++i) mag[i] = std::abs(table[i]);
      for (std::int64_t i = 0; i < s.num; ++i) {
        hits[idx[i]] += 1;
        for (std::int64_t c = 0; c < s.width; ++c) {
          want[idx[i] * s.width + c] += rows[i * s.width + c];
          mag[idx[i] * s.width + c] += std::abs(rows[i * s.width + c]);
        }
      }
      auto got = test::download(t, table.size(), stream());
      // Float additions in any order: |error| <= (terms) * 2^-24 * sum|terms| (a worst-case bound).
      std::int64_t wrong = 0, first = -1;
      for (std::int64_t k = 0; k < static_cast<std::int64_t>(got.size()); ++k) {
        const double tol = hits[k / s.width] * 0x1p-24 * mag[k] + 1e-30;
        if (!(std::abs(got[k] - want[k]) <= tol) && wrong++ == 0) first = k;
      }
      EXPECT_EQ(wrong, 0) << "first at " << first;
      EXPECT_LT(test::rel_error(got, want), 1e-5);
      EXPECT_TRUE(guards_intact(tb, table.size(), o.table));
    }
}

TEST_F(GatherTest, ScatterAddRowsWithDistinctIndicesIsExact) {
  SCOPED_TRACE(seed_note());
  const Shape3 s{5000, 12, 4097};
  auto table = test::random_uniform(s.rows * s.width, -1.0f, 1.0f, rng());
  auto rows = test::random_uniform(s.num * s.width, -1.0f, 1.0f, rng());
  auto idx = distinct_indices(s.num, s.rows);
  auto d_t = test::upload(table, stream()), d_r = test::upload(rows, stream());
  auto d_idx = test::upload(idx, stream());
  scatter_add_rows(d_t.data(), d_r.data(), d_idx.data(), s.num, s.width, stream());
  auto want = table;
  for (std::int64_t i = 0; i < s.num; ++i)
    for (std::int64_t c = 0; c < s.width; ++c) want[idx[i] * s.width + c] += rows[i * s.width + c];
  auto got = test::download(d_t, stream());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
}

// scatter_add_rows is the backward of gather_rows: for L = sum(up * gather(table)), dL/dtable =
// scatter_add(0, up). Central differences of L through the GPU gather at a few table entries
// (including a row no index selects, whose gradient is 0).
TEST_F(GatherTest, ScatterAddIsTheBackwardOfGather) {
  SCOPED_TRACE(seed_note());
  const Shape3 s{64, 5, 301};
  auto table = test::random_uniform(s.rows * s.width, -1.0f, 1.0f, rng());
  auto up = test::random_uniform(s.num * s.width, -1.0f, 1.0f, rng());
  auto idx = random_indices(s.num, s.rows - 1);  // row rows-1 is never gathered
  auto d_idx = test::upload(idx, stream());
  auto d_up = test::upload(up, stream());
  DeviceBuffer<float> grad(s.rows * s.width), out(s.num * s.width);
  grad.zero(stream());
  scatter_add_rows(grad.data(), d_up.data(), d_idx.data(), s.num, s.width, stream());
  auto g = test::download(grad, stream());

  auto loss = [&](const std::vector<float>& tab) {
    auto d_t = test::upload(tab, stream());
    gather_rows(out.data(), d_t.data(), d_idx.data(), s.num, s.width, stream());
    auto y = test::download(out, stream());
    double l = 0;
    for (std::size_t i = 0; i < y.size(); ++i) l += double(up[i]) * y[i];
    return l;
  };
  const float h = 1e-2f;
  std::uniform_int_distribution<std::int64_t> pick(0, s.rows * s.width - 1);
  for (int k = 0; k < 8; ++k) {
    const std::int64_t e = k == 0 ? s.rows * s.width - 1 : pick(rng());
    auto tp = table, tm = table;
    tp[e] += h;
    tm[e] -= h;
    const double fd = (loss(tp) - loss(tm)) / (double(tp[e]) - tm[e]);
    EXPECT_NEAR(fd, g[e], 1e-2 * std::abs(g[e]) + 1e-4) << "table element " << e;
  }
  EXPECT_EQ(g[s.rows * s.width - 1], 0.0f);
}

TEST_F(GatherTest, ZeroSizesWriteNothing) {
  auto [ob, out] = blank<float>(4, 0);
  auto d_idx = test::upload(std::vector<std::int32_t>{0, 0, 0, 0}, stream());
  gather_rows(out, out, d_idx.data(), 0, 4, stream());
  gather_rows(out, out, d_idx.data(), 4, 0, stream());
  scatter_rows(out, out, d_idx.data(), 0, 4, stream());
  scatter_add_rows(out, out, d_idx.data(), 4, 0, stream());
  EXPECT_TRUE(guards_intact(ob, 4, 0));
  auto all = test::download(ob, stream());
  for (float v : all) EXPECT_EQ(std::bit_cast<std::uint32_t>(v), 0xFFFFFFFFu);
  EXPECT_THROW(gather_rows(out, out, d_idx.data(), -1, 4, stream()), std::invalid_argument);
  EXPECT_THROW(scatter_rows(out, out, d_idx.data(), 4, -1, stream()), std::invalid_argument);
}

struct ColumnBlock {
  std::int64_t rows, width, stride, col;
};
// The first column, the last, the whole row, a one-wide block, a sequence's last step (T=16, H=64).
constexpr ColumnBlock kColumnBlocks[] = {{1, 1, 1, 0},      {7, 3, 10, 0},        {7, 3, 10, 7},     {4097, 5, 5, 0},
                                         {1000, 1, 37, 20}, {513, 64, 1024, 960}, {65536, 4, 29, 25}};

std::string trace(const ColumnBlock& c) {
  return "rows " + std::to_string(c.rows) + " width " + std::to_string(c.width) + " stride " +
         std::to_string(c.stride) + " col " + std::to_string(c.col);
}

TEST_F(GatherTest, ColumnBlocksGatherScatterAndExpandExactly) {
  SCOPED_TRACE(seed_note());
  for (const ColumnBlock& c : kColumnBlocks) {
    SCOPED_TRACE(trace(c));
    const auto wide = test::random_normal(static_cast<std::size_t>(c.rows * c.stride), 0.f, 1.f, rng());
    const auto packed = test::random_normal(static_cast<std::size_t>(c.rows * c.width), 0.f, 1.f, rng());
    std::vector<float> want_gather(packed.size()), want_scatter = wide, want_expand(wide.size(), 0.f);
    for (std::int64_t i = 0; i < c.rows; ++i)
      for (std::int64_t j = 0; j < c.width; ++j) {
        const std::size_t w = static_cast<std::size_t>(i * c.stride + c.col + j),
                          p = static_cast<std::size_t>(i * c.width + j);
        want_gather[p] = wide[w];
        want_scatter[w] = packed[p];
        want_expand[w] = packed[p];
      }
    auto [gb, g] = blank<float>(packed.size(), 1);
    auto [wb, w] = put(wide, 0);
    gather_columns(g, w, c.rows, c.width, c.stride, c.col, stream());
    auto [sb, sc] = put(wide, 1);
    auto [pb, p] = put(packed, 0);
    scatter_columns(sc, p, c.rows, c.width, c.stride, c.col, stream());
    auto [eb, e] = blank<float>(wide.size(), 1);
    expand_columns(e, p, c.rows, c.width, c.stride, c.col, stream());
    const auto view = [&](const DeviceBuffer<float>& buf, std::size_t n) {
      auto all = test::download(buf, stream());
      return std::vector<float>(all.begin() + 1, all.begin() + 1 + static_cast<std::ptrdiff_t>(n));
    };
    EXPECT_EQ(view(gb, packed.size()), want_gather);
    EXPECT_EQ(view(sb, wide.size()), want_scatter) << "scatter must leave the other columns alone";
    EXPECT_EQ(view(eb, wide.size()), want_expand) << "expand must zero the other columns";
    EXPECT_TRUE(guards_intact(gb, packed.size(), 1));
    EXPECT_TRUE(guards_intact(sb, wide.size(), 1));
    EXPECT_TRUE(guards_intact(eb, wide.size(), 1));
  }
}

TEST_F(GatherTest, ColumnBlocksOutsideTheRowAreRefused) {
  DeviceBuffer<float> a(64), b(64);
  EXPECT_THROW(gather_columns(a.data(), b.data(), 4, 5, 8, 4, stream()), std::invalid_argument);
  EXPECT_THROW(scatter_columns(a.data(), b.data(), 4, 2, 8, -1, stream()), std::invalid_argument);
  EXPECT_THROW(expand_columns(a.data(), b.data(), -1, 2, 8, 0, stream()), std::invalid_argument);
  expand_columns(a.data(), b.data(), 0, 2, 8, 0, stream());  // no rows: nothing to do
}

}  // namespace
}  // namespace foxhunt::gpu
