#include "svg_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "core/error.h"

namespace lr::cli {

namespace {

constexpr double kW = 460, kH = 340;             // one panel
constexpr double kL = 60, kR = 20, kT = 40, kB = 50;  // margins inside a panel
const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};

// Round axis ticks covering [lo, hi].
std::vector<double> ticks(double lo, double hi) {
  double span = std::max(hi - lo, 1e-9), step = std::pow(10.0, std::floor(std::log10(span / 4)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (span / (step * m) <= 6) {
      step *= m;
      break;
    }
  std::vector<double> t;
  for (double v = std::ceil(lo / step) * step; v <= hi + 1e-9; v += step) t.push_back(v);
  return t;
}

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) o += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : std::string(1, c);
  return o;
}

}  // namespace

void write_svg_plot(const std::string& path, const std::string& title,
                    const std::vector<PlotPanel>& panels) {
  std::string svg = fmt::format(
      "<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' font-family='sans-serif' font-size='12'>\n"
      "<rect width='100%' height='100%' fill='white'/>\n"
      "<text x='{}' y='20' text-anchor='middle' font-size='15'>{}</text>\n",
      kW * double(panels.size()), kH + 30, kW * double(panels.size()) / 2, esc(title));
  for (size_t p = 0; p < panels.size(); ++p) {
    const PlotPanel& pn = panels[p];
    const double ox = kW * double(p), oy = 30;
    double x0 = 1e300, x1 = -1e300, y0 = 0, y1 = 1;  // y axis from 0
    for (const PlotSeries& s : pn.series)
      for (auto [x, y] : s.points) {
        x0 = std::min(x0, x), x1 = std::max(x1, x), y1 = std::max(y1, y);
      }
    if (x0 > x1) x0 = 0, x1 = 1;
    if (x1 - x0 < 1e-9) x0 -= 0.5, x1 += 0.5;
    y1 *= 1.1;
    auto X = [&](double x) { return ox + kL + (x - x0) / (x1 - x0) * (kW - kL - kR); };
    auto Y = [&](double y) { return oy + kH - kB - (y - y0) / (y1 - y0) * (kH - kT - kB); };
    svg += fmt::format("<text x='{}' y='{}' text-anchor='middle' font-size='13'>{}</text>\n",
                       ox + kW / 2, oy + 20, esc(pn.title));
    svg += fmt::format("<rect x='{}' y='{}' width='{}' height='{}' fill='none' stroke='#444'/>\n",
                       X(x0), Y(y1), X(x1) - X(x0), Y(y0) - Y(y1));
    for (double t : ticks(x0, x1))
      svg += fmt::format("<text x='{}' y='{}' text-anchor='middle'>{:g}</text>\n", X(t), Y(y0) + 16, t);
    for (double t : ticks(y0, y1))
      svg += fmt::format("<line x1='{}' x2='{}' y1='{}' y2='{}' stroke='#ddd'/><text x='{}' y='{}' text-anchor='end'>{:g}</text>\n",
                         X(x0), X(x1), Y(t), Y(t), X(x0) - 4, Y(t) + 4, t);
    svg += fmt::format("<text x='{}' y='{}' text-anchor='middle'>{}</text>\n", ox + kW / 2, oy + kH - 12, esc(pn.xlabel));
    svg += fmt::format("<text x='{}' y='{}' text-anchor='middle' transform='rotate(-90 {} {})'>{}</text>\n",
                       ox + 16, oy + kH / 2, ox + 16, oy + kH / 2, esc(pn.ylabel));
    for (size_t si = 0; si < pn.series.size(); ++si) {
      const PlotSeries& s = pn.series[si];
      const char* col = kColors[si % 6];
      std::string pts;
      for (auto [x, y] : s.points) pts += fmt::format("{:.1f},{:.1f} ", X(x), Y(y));
      svg += fmt::format("<polyline points='{}' fill='none' stroke='{}' stroke-width='2'/>\n", pts, col);
      for (auto [x, y] : s.points)
        svg += fmt::format("<circle cx='{:.1f}' cy='{:.1f}' r='3' fill='{}'><title>{:.2f}</title></circle>\n", X(x), Y(y), col, y);
      svg += fmt::format("<text x='{}' y='{}' fill='{}'>{}</text>\n", X(x0) + 8, Y(y1) + 16 + 15 * double(si), col, esc(s.name));
    }
  }
  svg += "</svg>\n";
  std::ofstream out(path);
  if (!out) fail("{}: cannot write the plot", path);
  out << svg;
}

}  // namespace lr::cli
