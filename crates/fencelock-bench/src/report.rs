//! How results leave the bench: a table on the terminal, and under the results folder a JSON
//! file with the run's circumstances, the same table in Markdown and a PNG bar chart.

use std::path::{Path, PathBuf};

use plotters::prelude::*;
use plotters::style::FontStyle;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::machine::RunInfo;

/// A table of strings with a header row.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Table {
    /// Column titles.
    pub header: Vec<String>,
    /// Rows, each as long as the header.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with these column titles.
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    fn widths(&self) -> Vec<usize> {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        widths
    }

    /// The table aligned in columns for a terminal.
    pub fn to_text(&self) -> String {
        let widths = self.widths();
        let line = |cells: &[String]| {
            let padded: Vec<String> = cells
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect();
            padded.join("  ").trim_end().to_owned()
        };
        let mut out = line(&self.header);
        out.push('\n');
        for row in &self.rows {
            out.push_str(&line(row));
            out.push('\n');
        }
        out
    }

    /// The table in Markdown.
    pub fn to_markdown(&self) -> String {
        let mut out = format!("| {} |\n", self.header.join(" | "));
        out.push_str(&format!("|{}\n", "---|".repeat(self.header.len())));
        for row in &self.rows {
            out.push_str(&format!("| {} |\n", row.join(" | ")));
        }
        out
    }
}

/// One bar of a chart.
#[derive(Clone, Debug, Serialize)]
pub struct Bar {
    /// What the bar measures.
    pub label: String,
    /// Its value.
    pub value: f64,
}

/// A bar chart: one value per label, in one unit.
#[derive(Clone, Debug, Serialize)]
pub struct Chart {
    /// Title above the chart.
    pub title: String,
    /// Unit of the values.
    pub unit: String,
    /// The bars, top to bottom.
    pub bars: Vec<Bar>,
}

/// Everything a scenario reports.
#[derive(Debug, Serialize)]
pub struct Report<T: Serialize> {
    /// The scenario's file name stem, e.g. `handoff`.
    pub scenario: String,
    /// Where and when.
    pub run: RunInfo,
    /// The scenario's settings and measurements.
    pub results: T,
    /// The tables printed, in order.
    pub tables: Vec<(String, Table)>,
    /// Notes printed under the tables.
    pub notes: Vec<String>,
}

/// Where results go, and whether charts can be drawn.
#[derive(Debug)]
pub struct Output {
    dir: PathBuf,
    fonts: bool,
}

/// The font charts are drawn with: Debian's `fonts-dejavu-core`, or `FENCELOCK_BENCH_FONT`.
const DEFAULT_FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

impl Output {
    /// Creates the results folder and loads the chart font. A missing font only means no PNG.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the folder cannot be created.
    pub fn new(dir: &Path) -> Result<Output> {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let fonts = load_font();
        if !fonts {
            eprintln!(
                "fencelock-bench: no font at {DEFAULT_FONT} (install fonts-dejavu-core or set \
                 FENCELOCK_BENCH_FONT): tables and JSON only, no charts"
            );
        }
        Ok(Output {
            dir: dir.to_owned(),
            fonts,
        })
    }

    /// Prints the report's tables and notes and writes `<scenario>.json`, `<scenario>.md` and,
    /// for each chart, `<scenario>[-n].png`.
    ///
    /// # Errors
    ///
    /// [`Error::Io`], [`Error::Json`] or [`Error::Chart`] when a file cannot be written.
    pub fn publish<T: Serialize>(&self, report: &Report<T>, charts: &[Chart]) -> Result<()> {
        let mut markdown = format!(
            "# {}\n\n{} on {} cores ({}), {}, commit {}\n\n{}\n\n`{}`\n\n",
            report.scenario,
            report.run.date,
            report.run.cores,
            report.run.cpu_model,
            report.run.server,
            report.run.git_commit,
            report.run.sources.line(),
            report.run.command
        );
        for (title, table) in &report.tables {
            println!("\n{title}\n{}", table.to_text());
            markdown.push_str(&format!("## {title}\n\n{}\n", table.to_markdown()));
        }
        for note in &report.notes {
            println!("note: {note}");
            markdown.push_str(&format!("- {note}\n"));
        }
        let stem = self.dir.join(&report.scenario);
        write_file(
            &stem.with_extension("json"),
            &serde_json::to_vec_pretty(report)?,
        )?;
        write_file(&stem.with_extension("md"), markdown.as_bytes())?;
        if self.fonts {
            for (i, chart) in charts.iter().enumerate() {
                let name = if i == 0 {
                    format!("{}.png", report.scenario)
                } else {
                    format!("{}-{}.png", report.scenario, i + 1)
                };
                draw(chart, &self.dir.join(name))?;
            }
        }
        println!("results: {}.{{json,md,png}}", stem.display());
        Ok(())
    }
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(|e| Error::io(format!("writing {}", path.display()), e))
}

fn load_font() -> bool {
    let path = std::env::var("FENCELOCK_BENCH_FONT").unwrap_or_else(|_| DEFAULT_FONT.to_owned());
    let Ok(bytes) = std::fs::read(&path) else {
        return false;
    };
    // plotters keeps registered fonts for the life of the process.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok()
}

fn draw(chart: &Chart, path: &Path) -> Result<()> {
    let bars = chart.bars.len().max(1);
    let height = u32::try_from(90 + 34 * bars).unwrap_or(2000);
    let root = BitMapBackend::new(path, (900, height)).into_drawing_area();
    let fail = |e: &dyn std::fmt::Display| Error::Chart(format!("{}: {e}", path.display()));
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let max = chart
        .bars
        .iter()
        .map(|b| b.value)
        .fold(0.0_f64, f64::max)
        .max(f64::MIN_POSITIVE);
    let rows = bars as f64;
    let mut ctx = ChartBuilder::on(&root)
        .caption(&chart.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(30)
        .build_cartesian_2d(0.0..max * 1.05, -0.5..rows - 0.5)
        .map_err(|e| fail(&e))?;
    ctx.configure_mesh()
        .disable_y_mesh()
        .disable_y_axis()
        .x_desc(chart.unit.as_str())
        .x_label_formatter(&|v| short_number(*v))
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(|e| fail(&e))?;
    let palette = [RGBColor(70, 110, 180), RGBColor(200, 110, 60)];
    for (i, bar) in chart.bars.iter().enumerate() {
        // The first bar is drawn at the top.
        let y = rows - 1.0 - i as f64;
        let color = palette[usize::from(bar.label.starts_with("fencelock"))];
        ctx.draw_series(std::iter::once(Rectangle::new(
            [(0.0, y - 0.38), (bar.value, y + 0.38)],
            color.mix(0.75).filled(),
        )))
        .map_err(|e| fail(&e))?;
        ctx.draw_series(std::iter::once(Text::new(
            format!("{}  {}", bar.label, short_number(bar.value)),
            (max * 0.01, y + 0.2),
            ("sans-serif", 14).into_font().color(&BLACK),
        )))
        .map_err(|e| fail(&e))?;
    }
    root.present().map_err(|e| fail(&e))?;
    Ok(())
}

/// A number with three significant digits at most, for tables and chart labels.
pub fn short_number(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// `a ÷ b` with two decimals for a ratio column; `∞` when `b` is not positive.
pub fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}", a / b)
    } else {
        "∞".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_and_render_markdown() {
        let mut t = Table::new(&["name", "ops/s"]);
        t.row(vec!["fencelock".into(), "12".into()]);
        assert_eq!(t.to_text(), "name       ops/s\nfencelock  12\n");
        assert!(t.to_markdown().starts_with("| name | ops/s |\n|---|---|\n"));
    }

    #[test]
    fn every_result_written_says_which_sources_it_measured() {
        let dir = tempfile::tempdir().expect("tempdir");
        let output = Output::new(dir.path()).expect("output");
        let report = Report {
            scenario: "scenario".to_owned(),
            run: RunInfo::collect("Redis 7.0.15".to_owned()),
            results: serde_json::json!({"ratio": 0.81}),
            tables: vec![("t".to_owned(), Table::new(&["a"]))],
            notes: Vec::new(),
        };
        output.publish(&report, &[]).expect("published");
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let today = fencelock_sources::digest(&root, fencelock_sources::BENCH).expect("a digest");
        let json: serde_json::Value = serde_json::from_slice(
            &std::fs::read(dir.path().join("scenario.json")).expect("the JSON"),
        )
        .expect("valid JSON");
        assert_eq!(
            json["run"]["sources"]["digest"].as_str(),
            Some(today.as_str())
        );
        assert_eq!(
            json["run"]["sources"]["paths"],
            serde_json::json!(fencelock_sources::BENCH)
        );
        let markdown = std::fs::read_to_string(dir.path().join("scenario.md")).expect("the MD");
        let stamp = fencelock_sources::Stamp::of_markdown(&markdown).expect("a sources line");
        assert_eq!(stamp, report.run.sources);
        assert_eq!(stamp.matches(&root), Ok(()));
    }
}
