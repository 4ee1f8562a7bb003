//! The font every PNG plot of the CLI and its extensions labels with (plotters draws text
//! with a registered TrueType font; the GPU machines and minimal images have none by
//! default).

use plotters::style::FontStyle;
use std::path::PathBuf;

/// Fonts tried after `BPFTIME_FONT`.
pub const FONTS: [&str; 5] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation/LiberationSans-Regular.ttf",
];

/// Registers `BPFTIME_FONT`, else the first of [`FONTS`] that loads, as `sans-serif`,
/// once per process; the error names what to install.
pub fn register_font() -> Result<(), String> {
    static DONE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        let candidates: Vec<PathBuf> = std::env::var_os("BPFTIME_FONT")
            .map(PathBuf::from)
            .into_iter()
            .chain(FONTS.iter().map(PathBuf::from))
            .collect();
        for p in &candidates {
            if let Ok(bytes) = std::fs::read(p) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return Ok(());
                }
            }
        }
        Err(format!(
            "no TrueType font for the plot labels: set BPFTIME_FONT, or install one of {}",
            FONTS.join(", ")
        ))
    })
    .clone()
}
