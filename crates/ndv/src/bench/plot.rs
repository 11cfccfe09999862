//! A hand-written SVG line plot of the bandwidth sweep (log-2 x axis).

/// `rows`: (message bytes, ndverbs Gb/s, TCP Gb/s).
pub fn svg(rows: &[(usize, f64, f64)], subtitle: &str) -> String {
    let (w, h) = (720.0, 440.0);
    let (l, r, t, b) = (70.0, 20.0, 50.0, 60.0);
    let pw = w - l - r;
    let ph = h - t - b;
    let xmin = rows.first().map_or(1.0, |x| (x.0 as f64).log2());
    let xmax = rows
        .last()
        .map_or(2.0, |x| (x.0 as f64).log2())
        .max(xmin + 1.0);
    let ymax_raw = rows.iter().fold(0.0f64, |m, x| m.max(x.1).max(x.2));
    let step = nice_step(ymax_raw / 5.0);
    let ymax = (ymax_raw / step).ceil().max(1.0) * step;
    let px = |s: usize| l + ((s as f64).log2() - xmin) / (xmax - xmin) * pw;
    let py = |v: f64| t + ph - v / ymax * ph;
    let mut o = String::new();
    o.push_str(&format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-size=\"15\">RDMA WRITE bandwidth (ndverbs, 1 QP, MTU 4096) vs one TCP stream (iperf3), loopback</text>\n\
         <text x=\"{}\" y=\"37\" text-anchor=\"middle\" fill=\"#555\">{}</text>\n",
        w / 2.0,
        w / 2.0,
        escape(subtitle)
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
    for &(s, _, _) in rows {
        if ((s as f64).log2() as u32) % 2 == 0 {
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
         <text transform=\"translate(18 {}) rotate(-90)\" text-anchor=\"middle\">Gb/s</text>\n",
        l + pw / 2.0,
        h - 15.0,
        t + ph / 2.0
    ));
    for (i, (name, color)) in [
        ("ndverbs RDMA WRITE", "#d62728"),
        ("TCP, 1 stream (iperf3 -l size, ≤ 1 MiB)", "#1f77b4"),
    ]
    .iter()
    .enumerate()
    {
        let pts: Vec<String> = rows
            .iter()
            .map(|x| {
                let v = if i == 0 { x.1 } else { x.2 };
                format!("{:.1},{:.1}", px(x.0), py(v))
            })
            .collect();
        o.push_str(&format!(
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"/>\n",
            pts.join(" ")
        ));
        for p in &pts {
            let (x, y) = p.split_once(',').unwrap_or(("0", "0"));
            o.push_str(&format!(
                "<circle cx=\"{x}\" cy=\"{y}\" r=\"3\" fill=\"{color}\"/>\n"
            ));
        }
        let ly = t + 14.0 + i as f64 * 18.0;
        o.push_str(&format!(
            "<line x1=\"{}\" x2=\"{}\" y1=\"{ly}\" y2=\"{ly}\" stroke=\"{color}\" stroke-width=\"2\"/>\
             <text x=\"{}\" y=\"{}\">{name}</text>\n",
            l + 12.0,
            l + 36.0,
            l + 42.0,
            ly + 4.0
        ));
    }
    o.push_str("</svg>\n");
    o
}

fn nice_step(raw: f64) -> f64 {
    if raw <= 0.0 {
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

fn size_label(s: usize) -> String {
    if s >= 1 << 20 {
        format!("{}M", s >> 20)
    } else if s >= 1 << 10 {
        format!("{}K", s >> 10)
    } else {
        s.to_string()
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
