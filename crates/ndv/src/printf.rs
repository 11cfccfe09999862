//! The few C `printf` conversions whose Rust equivalent differs, for the
//! output of the tools ndv imitates byte for byte
//! (`perftest::report`, `pingpong::report`): `%#x` (no
//! `0x` for zero), `%g`, and NaN/infinity.

/// C `%.{prec}f`: Rust's fixed formatting (which rounds ties to even like
/// glibc) except for NaN and infinities, spelled as glibc does.
pub(crate) fn c_fixed(x: f64, prec: usize) -> String {
    if x.is_nan() {
        if x.is_sign_negative() { "-nan" } else { "nan" }.to_string()
    } else if x.is_infinite() {
        if x < 0.0 { "-inf" } else { "inf" }.to_string()
    } else {
        format!("{x:.prec$}")
    }
}

/// C `%-{width}.{prec}f`.
pub(crate) fn c_left(x: f64, width: usize, prec: usize) -> String {
    format!("{:<width$}", c_fixed(x, prec))
}

/// C `%#0{width}x`: `0x` and zero padding up to `width` characters in all,
/// except that a zero value gets no `0x` (so LID 0 prints as `0000`).
pub(crate) fn c_alt_hex(v: u64, width: usize) -> String {
    if v == 0 {
        format!("{:0width$}", 0)
    } else {
        let digits = width.saturating_sub(2);
        format!("0x{v:0digits$x}")
    }
}

/// C `%g` (precision 6): 6 significant digits, trailing zeros removed,
/// exponent form (`1e-05`, `1.5e+07`) below 1e-4 or from 1e6 on.
pub(crate) fn c_g(x: f64) -> String {
    if !x.is_finite() {
        return c_fixed(x, 0);
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    const P: i32 = 6;
    // Round to P significant digits first: that decides the exponent.
    let sci = format!("{:.*e}", (P - 1) as usize, x);
    let (mantissa, exp) = sci.split_once('e').expect("exponent");
    let exp: i32 = exp.parse().expect("exponent digits");
    if (-4..P).contains(&exp) {
        let prec = (P - 1 - exp) as usize;
        strip_zeros(&format!("{x:.prec$}")).to_string()
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", strip_zeros(mantissa), exp.abs())
    }
}

fn strip_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printf_compat() {
        // Values checked against glibc printf.
        assert_eq!(c_alt_hex(0, 4), "0000");
        assert_eq!(c_alt_hex(0x1b, 6), "0x001b");
        assert_eq!(c_alt_hex(0x298e0, 6), "0x298e0");
        assert_eq!(c_alt_hex(0x8a0ba0, 6), "0x8a0ba0");
        assert_eq!(c_alt_hex(0x80, 4), "0x80");
        assert_eq!(c_alt_hex(0x2427, 8), "0x002427");
        assert_eq!(c_alt_hex(0x5606_5659_8000, 16), "0x00560656598000");
        assert_eq!(c_alt_hex(1, 4), "0x01");
        assert_eq!(c_left(7.18, 7, 2), "7.18   ");
        assert_eq!(c_left(259.09, 7, 2), "259.09 ");
        assert_eq!(c_left(1051.22, 7, 2), "1051.22");
        assert_eq!(c_left(0.125, 7, 2), "0.12   ");
        assert_eq!(c_fixed(f64::NAN, 2), "nan");
        assert_eq!(c_fixed(f64::INFINITY, 2), "inf");
        for (x, want) in [
            (3667.47, "3667.47"),
            (20.2501, "20.2501"),
            (34.9218, "34.9218"),
            (0.5, "0.5"),
            (100.0, "100"),
            (123456.0, "123456"),
            (1234567.0, "1.23457e+06"),
            (999999.5, "1e+06"),
            (0.0001, "0.0001"),
            (0.00001234, "1.234e-05"),
            (-2.5, "-2.5"),
            (0.0, "0"),
        ] {
            assert_eq!(c_g(x), want, "{x}");
        }
    }
}
