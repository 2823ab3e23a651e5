//! Pictures as a viewer sees them: an SVG written by `--plot` rendered to PNG by Debian's real
//! SVG renderer (`rsvg-convert`, package librsvg2-bin), decoded with the `png` crate, and its
//! pixels counted — how much is drawn at all, and how much in a given colour (a curve, the
//! reference line, a shaded stall).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The colours `report::plot` draws with.
pub const NOW: [u8; 3] = [31, 119, 180];
pub const EARLIER: [u8; 3] = [255, 127, 14];
pub const EXPECTED: [u8; 3] = [214, 39, 40];
/// A stall's shading: the stall red at 18% over white.
pub const STALL_SHADE: [u8; 3] = [248, 216, 216];

/// A decoded PNG, 8-bit RGB or RGBA.
pub struct Picture {
    pub png: PathBuf,
    pub width: u32,
    pub height: u32,
    channels: usize,
    data: Vec<u8>,
}

/// Renders `svg` to `svg`.png with rsvg-convert (white background) and decodes it. Fails the
/// test when rsvg-convert is missing or refuses the file.
pub fn render(svg: &Path) -> Picture {
    let png = svg.with_extension("png");
    let out = Command::new("rsvg-convert")
        .args(["--background-color", "white", "-o"])
        .arg(&png)
        .arg(svg)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "rsvg-convert is needed to render the pictures (apt-get install librsvg2-bin): {e}"
            )
        });
    assert!(
        out.status.success(),
        "rsvg-convert refused {}: {}",
        svg.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(&png).expect("open the PNG"),
    ));
    let mut reader = decoder.read_info().expect("a PNG header");
    let mut buf = vec![0; reader.output_buffer_size().expect("a PNG size")];
    let info = reader.next_frame(&mut buf).expect("the PNG's pixels");
    let channels = match (info.color_type, info.bit_depth) {
        (png::ColorType::Rgba, png::BitDepth::Eight) => 4,
        (png::ColorType::Rgb, png::BitDepth::Eight) => 3,
        other => panic!("rsvg-convert wrote {other:?}, not 8-bit RGB(A)"),
    };
    buf.truncate(info.buffer_size());
    Picture {
        png,
        width: info.width,
        height: info.height,
        channels,
        data: buf,
    }
}

impl Picture {
    fn pixels(&self) -> impl Iterator<Item = [u8; 3]> + '_ {
        self.data
            .chunks_exact(self.channels)
            .map(|p| [p[0], p[1], p[2]])
    }

    /// The share of pixels that are not (near) white.
    pub fn ink(&self) -> f64 {
        let n = self.pixels().filter(|p| p.iter().any(|&c| c < 235)).count();
        n as f64 / f64::from(self.width * self.height)
    }

    /// Pixels within `tolerance` of `rgb` on every channel.
    pub fn count(&self, rgb: [u8; 3], tolerance: u8) -> usize {
        self.pixels()
            .filter(|p| (0..3).all(|i| p[i].abs_diff(rgb[i]) <= tolerance))
            .count()
    }

    /// Fails unless the picture is of a sensible size with something drawn on it.
    pub fn assert_not_blank(&self) {
        assert!(
            self.width >= 600 && self.height >= 300,
            "{}: {}x{}",
            self.png.display(),
            self.width,
            self.height
        );
        let ink = self.ink();
        assert!(
            ink > 0.02,
            "{} is nearly blank: {:.2}% drawn",
            self.png.display(),
            ink * 100.0
        );
    }

    /// Fails unless at least `min` pixels are drawn in `rgb` (what: for the message).
    pub fn assert_drawn(&self, what: &str, rgb: [u8; 3], min: usize) {
        let n = self.count(rgb, 12);
        assert!(
            n >= min,
            "{}: {what} is not drawn ({n} pixels of {rgb:?}, want {min})",
            self.png.display()
        );
    }
}
