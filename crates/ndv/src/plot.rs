//! A hand-written SVG line plot against message size (log-2 x axis), shared
//! by `ndv bench`'s sweep and `ndv perf --plot`.

/// One line of the plot: (message bytes, value) points, smallest size first.
pub struct Series<'a> {
    /// Legend text.
    pub name: &'a str,
    /// Stroke colour (`#rrggbb`).
    pub color: &'a str,
    /// The points.
    pub points: Vec<(u64, f64)>,
}

/// A plot of one or more series against message size.
pub struct Plot<'a> {
    /// First line above the plot.
    pub title: &'a str,
    /// Second, grey line above the plot (the machine, the options …).
    pub subtitle: &'a str,
    /// Label of the y axis (`Gb/s`, `MB/s`, `t_typical (usec)` …).
    pub y_label: &'a str,
    /// The lines, drawn in order and listed in the legend.
    pub series: Vec<Series<'a>>,
}

impl Plot<'_> {
    /// The SVG document.
    pub fn svg(&self) -> String {
        let (w, h) = (720.0, 440.0);
        let (l, r, t, b) = (70.0, 20.0, 50.0, 60.0);
        let pw = w - l - r;
        let ph = h - t - b;
        let sizes: Vec<u64> = {
            let mut s: Vec<u64> = self
                .series
                .iter()
                .flat_map(|s| s.points.iter().map(|p| p.0.max(1)))
                .collect();
            s.sort_unstable();
            s.dedup();
            s
        };
        let lg = |s: u64| (s.max(1) as f64).log2();
        // One size: in the middle of a one-octave axis.
        let xmin = sizes.first().map_or(1.0, |&s| lg(s)) - if sizes.len() == 1 { 0.5 } else { 0.0 };
        let xmax = sizes.last().map_or(2.0, |&s| lg(s)).max(xmin + 1.0);
        let ymax_raw = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .filter(|v| v.is_finite())
            .fold(0.0f64, f64::max);
        let step = nice_step(ymax_raw / 5.0);
        let ymax = (ymax_raw / step).ceil().max(1.0) * step;
        let px = |s: u64| l + (lg(s) - xmin) / (xmax - xmin) * pw;
        let py = |v: f64| t + ph - v.clamp(0.0, ymax) / ymax * ph;
        let mut o = String::new();
        o.push_str(&format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
             <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
             <text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n\
             <text x=\"{}\" y=\"37\" text-anchor=\"middle\" fill=\"#555\">{}</text>\n",
            w / 2.0,
            escape(self.title),
            w / 2.0,
            escape(self.subtitle)
        ));
        // Grid and axes.
        let mut y = 0.0;
        while y <= ymax + 1e-9 {
            o.push_str(&format!(
                "<line x1=\"{l}\" x2=\"{}\" y1=\"{py:.1}\" y2=\"{py:.1}\" stroke=\"#ddd\"/>\
                 <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n",
                l + pw,
                l - 6.0,
                py(y) + 4.0,
                trim(y),
                py = py(y)
            ));
            y += step;
        }
        // Every size is labelled when there are few; otherwise every other
        // one, counted from the largest (which is always labelled).
        let every = sizes.len() <= 12;
        for (i, &s) in sizes.iter().enumerate() {
            if every || (sizes.len() - 1 - i) % 2 == 0 {
                o.push_str(&format!(
                    "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{t}\" y2=\"{}\" stroke=\"#eee\"/>\
                     <text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                    t + ph,
                    t + ph + 16.0,
                    size_label(s),
                    x = px(s)
                ));
            }
        }
        o.push_str(&format!(
            "<rect x=\"{l}\" y=\"{t}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" stroke=\"#333\"/>\n\
             <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">message size (bytes)</text>\n\
             <text transform=\"translate(18 {}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
            l + pw / 2.0,
            h - 15.0,
            t + ph / 2.0,
            escape(self.y_label)
        ));
        for (i, s) in self.series.iter().enumerate() {
            let color = escape(s.color);
            let pts: Vec<(f64, f64)> = s.points.iter().map(|p| (px(p.0), py(p.1))).collect();
            let line: Vec<String> = pts
                .iter()
                .map(|p| format!("{:.1},{:.1}", p.0, p.1))
                .collect();
            o.push_str(&format!(
                "<polyline points=\"{}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"/>\n",
                line.join(" ")
            ));
            for (x, y) in &pts {
                o.push_str(&format!(
                    "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3\" fill=\"{color}\"/>\n"
                ));
            }
            let ly = t + 14.0 + i as f64 * 18.0;
            o.push_str(&format!(
                "<line x1=\"{}\" x2=\"{}\" y1=\"{ly}\" y2=\"{ly}\" stroke=\"{color}\" stroke-width=\"2\"/>\
                 <text x=\"{}\" y=\"{}\">{}</text>\n",
                l + 12.0,
                l + 36.0,
                l + 42.0,
                ly + 4.0,
                escape(s.name)
            ));
        }
        o.push_str("</svg>\n");
        o
    }
}

fn nice_step(raw: f64) -> f64 {
    if raw.is_nan() || raw <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    let m = raw / p;
    let n = if m <= 1.0 {
        1.0
    } else if m <= 2.0 {
        2.0
    } else if m <= 5.0 {
        5.0
    } else {
        10.0
    };
    n * p
}

fn trim(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn size_label(s: u64) -> String {
    if s >= 1 << 20 && s % (1 << 20) == 0 {
        format!("{}M", s >> 20)
    } else if s >= 1 << 10 && s % (1 << 10) == 0 {
        format!("{}K", s >> 10)
    } else {
        s.to_string()
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plot(points: Vec<(u64, f64)>) -> String {
        Plot {
            title: "a <b> & c",
            subtitle: "",
            y_label: "Gb/s",
            series: vec![Series {
                name: "x",
                color: "#d62728",
                points,
            }],
        }
        .svg()
    }

    #[test]
    fn one_circle_per_point_and_escaped_text() {
        let s = plot((1..=23).map(|i| (1u64 << i, i as f64)).collect());
        assert_eq!(s.matches("<circle ").count(), 23);
        assert!(s.contains("a &lt;b&gt; &amp; c"), "{s}");
        assert!(s.contains(">8M</text>"), "{s}");
        assert!(s.starts_with("<svg ") && s.ends_with("</svg>\n"));
    }

    #[test]
    fn a_single_point_is_labelled_and_inside_the_frame() {
        let s = plot(vec![(65536, 3.5)]);
        assert_eq!(s.matches("<circle ").count(), 1);
        assert!(s.contains("<circle cx=\"385.0\""), "{s}");
        assert!(s.contains(">64K</text>"), "{s}");
        assert!(!s.contains("NaN") && !s.contains("inf"), "{s}");
    }

    #[test]
    fn no_points_and_zero_values_draw_without_nan() {
        assert!(!plot(vec![]).contains("NaN"));
        assert!(!plot(vec![(2, 0.0), (4, 0.0)]).contains("NaN"));
    }
}
