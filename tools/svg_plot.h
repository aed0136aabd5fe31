// A minimal SVG line chart writer for `lowrank bench --plot`: one or more
// panels side by side, each with series of (x, y) points.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace lr::cli {

struct PlotSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // sorted by x
};

struct PlotPanel {
  std::string title, xlabel, ylabel;
  std::vector<PlotSeries> series;
};

// Writes the panels as one SVG file; throws lr::Error when it cannot write.
void write_svg_plot(const std::string& path, const std::string& title,
                    const std::vector<PlotPanel>& panels);

}  // namespace lr::cli
