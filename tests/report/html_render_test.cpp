// report.html renders: headless Chromium takes a screenshot of the page, libpng decodes it, and
// every chart's plot area (at the page coordinates report/html.hpp fixes) holds drawn series:
// enough saturated pixels (the palette's colours; the grid and axes are grey) and pixel variance.
// A report whose curves are all undefined draws no series, and the same check finds its plot
// areas empty: the check can fail. Skips with the reason where Chromium is absent (scripts/lib.sh
// installs Debian's chromium for the tests where the platform has it) or libpng was not found.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#ifdef FOXHUNT_HAVE_PNG
#include <png.h>
#endif

#include "report/html.hpp"
#include "tests/report/fake_report.hpp"

namespace foxhunt::report {
namespace {
namespace fs = std::filesystem;

std::string find_chromium() {
  if (const char* c = std::getenv("FOXHUNT_CHROMIUM")) return c;
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  std::size_t begin = 0;
  while (begin <= p.size()) {
    const std::size_t end = std::min(p.find(':', begin), p.size());
    const fs::path dir = p.substr(begin, end - begin);
    for (const char* name : {"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"})
      if (!dir.empty() && ::access((dir / name).c_str(), X_OK) == 0) return (dir / name).string();
    begin = end + 1;
  }
  return "";
}

struct Image {
  int width = 0, height = 0;
  std::vector<unsigned char> rgb;  // row-major, 3 bytes a pixel
};

struct BoxStats {
  long colored = 0;  // pixels whose channels differ by more than 80 (not white, black or grey)
  double variance = 0.0;
};

BoxStats box_stats(const Image& img, const PixelBox& b) {
  BoxStats s;
  double sum = 0, sum2 = 0;
  long n = 0;
  for (int y = b.y0 + 2; y < b.y1 - 2 && y < img.height; ++y)
    for (int x = b.x0 + 2; x < b.x1 - 2 && x < img.width; ++x) {
      const unsigned char* p = &img.rgb[(static_cast<std::size_t>(y) * img.width + x) * 3];
      const int hi = std::max({p[0], p[1], p[2]}), lo = std::min({p[0], p[1], p[2]});
      s.colored += hi - lo > 80;
      const double l = 0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2];
      sum += l;
      sum2 += l * l;
      ++n;
    }
  if (n > 0) s.variance = sum2 / n - (sum / n) * (sum / n);
  return s;
}

class HtmlRender : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef FOXHUNT_HAVE_PNG
    GTEST_SKIP() << "libpng was not found at configure time (Debian: libpng-dev): the screenshot cannot be decoded";
#endif
    chromium_ = find_chromium();
    if (chromium_.empty())
      GTEST_SKIP() << "no chromium on PATH (Debian: apt-get install chromium; or set FOXHUNT_CHROMIUM): the HTML "
                      "report is not rendered";
    dir_ = fs::temp_directory_path() / ("foxhunt_html_render_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // Writes the page, screenshots it at 1000 x 1200 CSS pixels (scale 1) and decodes the PNG.
  Image render(const Report& r, const std::string& name) {
    const fs::path html = dir_ / (name + ".html"), png = dir_ / (name + ".png");
    write_text_file(html, report_html(r));
    const std::string cmd = "timeout 120 '" + chromium_ +
                            "' --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run "
                            "--force-device-scale-factor=1 --window-size=1000,1200 --user-data-dir='" +
                            (dir_ / "profile").string() + "' --screenshot='" + png.string() + "' 'file://" +
                            html.string() + "' >'" + (dir_ / "chromium.log").string() + "' 2>&1";
    const int rc = std::system(cmd.c_str());
    EXPECT_EQ(rc, 0) << cmd;
    EXPECT_TRUE(fs::exists(png)) << "no screenshot; see " << (dir_ / "chromium.log");
    Image img;
#ifdef FOXHUNT_HAVE_PNG
    png_image pi{};
    pi.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_file(&pi, png.c_str())) {
      ADD_FAILURE() << "libpng: " << pi.message;
      return img;
    }
    pi.format = PNG_FORMAT_RGB;
    img.rgb.resize(PNG_IMAGE_SIZE(pi));
    if (!png_image_finish_read(&pi, nullptr, img.rgb.data(), 0, nullptr)) {
      ADD_FAILURE() << "libpng: " << pi.message;
      return img;
    }
    img.width = static_cast<int>(pi.width);
    img.height = static_cast<int>(pi.height);
#endif
    return img;
  }

  std::string chromium_;
  fs::path dir_;
};

TEST_F(HtmlRender, ChartAreasHoldTheSeries) {
  Report r = test::fake_report();
  summarize(r);
  const Image img = render(r, "report");
  ASSERT_EQ(img.width, 1000);
  ASSERT_GE(img.height, 1200);
  const std::vector<PixelBox> boxes = chart_plot_boxes(r);
  ASSERT_EQ(boxes.size(), 3u);
  for (std::size_t k = 0; k < boxes.size(); ++k) {
    ASSERT_LE(boxes[k].y1, img.height);
    const BoxStats s = box_stats(img, boxes[k]);
    const long area = static_cast<long>(boxes[k].x1 - boxes[k].x0) * (boxes[k].y1 - boxes[k].y0);
    EXPECT_GT(s.colored, area / 500) << "chart " << k << ": " << s.colored << " coloured pixels of " << area;
    EXPECT_GT(s.variance, 20.0) << "chart " << k;
  }
}

TEST_F(HtmlRender, EmptyCurvesLeaveThePlotAreasBlank) {
  Report r = test::fake_report();
  for (PolicyRun& run : r.runs) {
    for (auto& v : run.curves.equity) v = std::nan("");
    for (auto& v : run.curves.drawdown) v = std::nan("");
    for (auto& v : run.curves.weight) v = std::nan("");
  }
  summarize(r);
  const Image img = render(r, "blank");
  ASSERT_EQ(img.width, 1000);
  for (const PixelBox& b : chart_plot_boxes(r)) EXPECT_LT(box_stats(img, b).colored, 20);
}

}  // namespace
}  // namespace foxhunt::report
