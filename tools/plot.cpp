#include "plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "ferry/base/file.h"
#include "error.h"

namespace ferry::tools {
namespace {

struct point {
  double x, y;
};
struct series {
  std::string name, color;
  std::vector<point> points;
  bool markers = false;
};

// 1, 2 or 5 times a power of ten: about `count` ticks over [lo, hi].
double tick_step(double lo, double hi, int count) {
  const double raw = (hi - lo) / count;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 5.0}) {
    if (m * p >= raw) return m * p;
  }
  return 10 * p;
}

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", std::abs(v) < 1e-12 ? 0.0 : v);
  return text;
}

// One panel at (left, top), size w x h, with axes, ticks, labels, a legend.
void panel(std::ostringstream& svg, double left, double top, double w, double h, const std::string& title,
           const std::string& y_label, const std::vector<series>& lines, double x_max) {
  double y_lo = INFINITY, y_hi = -INFINITY;
  for (const auto& s : lines) {
    for (const auto& p : s.points) {
      y_lo = std::min(y_lo, p.y);
      y_hi = std::max(y_hi, p.y);
    }
  }
  if (!std::isfinite(y_lo)) y_lo = 0, y_hi = 1;
  if (y_hi - y_lo < 1e-9) y_lo -= 0.5, y_hi += 0.5;
  const double pad = (y_hi - y_lo) * 0.05;
  y_lo -= pad;
  y_hi += pad;
  const double ys = tick_step(y_lo, y_hi, 5);
  y_lo = std::floor(y_lo / ys) * ys;
  y_hi = std::ceil(y_hi / ys) * ys;
  const double xs = tick_step(0, x_max, 10) < 1 ? 1 : tick_step(0, x_max, 10);
  const auto X = [&](double x) { return left + x / x_max * w; };
  const auto Y = [&](double y) { return top + h - (y - y_lo) / (y_hi - y_lo) * h; };
  svg << "<text x='" << left + w / 2 << "' y='" << top - 12 << "' text-anchor='middle' font-size='15' font-weight='bold'>"
      << title << "</text>\n";
  svg << "<rect x='" << left << "' y='" << top << "' width='" << w << "' height='" << h
      << "' fill='none' stroke='#333'/>\n";
  for (double y = y_lo; y <= y_hi + ys / 2; y += ys) {
    svg << "<line x1='" << left << "' x2='" << left + w << "' y1='" << Y(y) << "' y2='" << Y(y)
        << "' stroke='#ddd'/><text x='" << left - 6 << "' y='" << Y(y) + 4 << "' text-anchor='end' font-size='11'>"
        << number(y) << "</text>\n";
  }
  for (double x = 0; x <= x_max + xs / 2; x += xs) {
    svg << "<line x1='" << X(x) << "' x2='" << X(x) << "' y1='" << top + h << "' y2='" << top + h + 5
        << "' stroke='#333'/><text x='" << X(x) << "' y='" << top + h + 18 << "' text-anchor='middle' font-size='11'>"
        << number(x) << "</text>\n";
  }
  svg << "<text x='" << left + w / 2 << "' y='" << top + h + 38 << "' text-anchor='middle' font-size='12'>epoch</text>\n";
  svg << "<text transform='translate(" << left - 46 << ',' << top + h / 2
      << ") rotate(-90)' text-anchor='middle' font-size='12'>" << y_label << "</text>\n";
  double legend_y = top + 16;
  for (const auto& s : lines) {
    if (s.points.empty()) continue;
    svg << "<polyline fill='none' stroke='" << s.color << "' stroke-width='" << (s.markers ? 2 : 1.2) << "' points='";
    for (const auto& p : s.points) svg << X(p.x) << ',' << Y(p.y) << ' ';
    svg << "'/>\n";
    if (s.markers) {
      for (const auto& p : s.points) svg << "<circle cx='" << X(p.x) << "' cy='" << Y(p.y) << "' r='3' fill='" << s.color << "'/>\n";
    }
    svg << "<line x1='" << left + w - 150 << "' x2='" << left + w - 130 << "' y1='" << legend_y - 4 << "' y2='"
        << legend_y - 4 << "' stroke='" << s.color << "' stroke-width='2'/><text x='" << left + w - 124 << "' y='"
        << legend_y << "' font-size='11'>" << s.name << "</text>\n";
    legend_y += 16;
  }
}

}  // namespace

result<void, error> plot(const std::string& metrics, const std::string& svg_path) {
  std::ifstream in(metrics);
  if (!in) return error(errc::io_error, metrics, errno);
  std::map<std::int64_t, point> steps;     // by global step
  struct epoch_record {
    double train_loss, train_acc, test_acc;
  };
  std::map<std::int64_t, epoch_record> epochs;  // by epoch
  std::string line;
  for (std::size_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    const auto where = metrics + ":" + std::to_string(n);
    if (!j.is_object() || !j.contains("kind") || !j["kind"].is_string()) {
      return error(tools_errc::bad_metrics, where);
    }
    // Numbers a plot can place: finite, epochs counted from 1.
    const auto finite = [&](const char* key) {
      const auto& v = j.at(key);
      if (!v.is_number() || !std::isfinite(v.get<double>())) throw std::out_of_range(key);
      return v.get<double>();
    };
    const auto count = [&](const char* key) {
      const auto& v = j.at(key);
      if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > (1 << 30)) {
        throw std::out_of_range(key);
      }
      return v.get<std::int64_t>();
    };
    try {
      if (j["kind"] == "step") {
        const double x = static_cast<double>(count("epoch") - 1) +
                         static_cast<double>(count("step")) / static_cast<double>(count("steps"));
        steps[count("global_step")] = {x, finite("loss")};
      } else if (j["kind"] == "epoch") {
        epochs[count("epoch")] = {finite("train_loss"), finite("train_acc"), finite("test_acc")};
      }
    } catch (const std::exception&) {  // a missing or out-of-range field
      return error(tools_errc::bad_metrics, where);
    }
  }
  if (epochs.empty() && steps.empty()) return error(tools_errc::bad_metrics, metrics + ": no records");
  series step_loss{"loss (rank 0, per step)", "#9ab", {}, false};
  series train_loss{"train loss (epoch)", "#c33", {}, true};
  series train_acc{"train", "#c33", {}, true};
  series test_acc{"test", "#36c", {}, true};
  double x_max = 1;
  for (const auto& [g, p] : steps) {
    step_loss.points.push_back(p);
    x_max = std::max(x_max, p.x);
  }
  for (const auto& [e, r] : epochs) {
    const auto x = static_cast<double>(e);
    train_loss.points.push_back({x, r.train_loss});
    train_acc.points.push_back({x, 100 * r.train_acc});
    test_acc.points.push_back({x, 100 * r.test_acc});
    x_max = std::max(x_max, x);
  }
  std::ostringstream svg;
  svg << "<?xml version='1.0' encoding='UTF-8'?>\n"
         "<svg xmlns='http://www.w3.org/2000/svg' width='1000' height='420' viewBox='0 0 1000 420' "
         "font-family='sans-serif'>\n<rect width='1000' height='420' fill='white'/>\n";
  panel(svg, 80, 50, 380, 300, "Loss", "cross-entropy loss", {step_loss, train_loss}, x_max);
  panel(svg, 590, 50, 380, 300, "Accuracy", "accuracy (%)", {train_acc, test_acc}, x_max);
  svg << "</svg>\n";
  const auto text = svg.str();
  return base::write_file_atomic(svg_path, std::as_bytes(std::span(text.data(), text.size())));
}

}  // namespace ferry::tools
