//! The sweep's plot: goodput (and the ideal, goodput = offered) above, the
//! admitted and shed p99 below, both against offered load; SVG only.

use std::path::Path;

use plotters::prelude::*;

use super::step::StepResult;

/// Draws `steps` into an SVG at `path`.
///
/// # Errors
/// When the file cannot be written.
pub fn draw(path: &Path, capacity: f64, steps: &[StepResult]) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (900, 700)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (upper, lower) = root.split_vertically(360);
    let max_x = steps.iter().map(|s| s.offered).fold(capacity, f64::max) * 1.05;
    let max_good = steps
        .iter()
        .map(StepResult::goodput)
        .fold(capacity, f64::max)
        * 1.15;

    let mut chart = ChartBuilder::on(&upper)
        .caption(
            format!("ShopEasy under overload (capacity {capacity:.0}/s)"),
            ("sans-serif", 20),
        )
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..max_x, 0.0..max_good)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("offered (requests/s)")
        .y_desc("goodput (2xx in deadline /s)")
        .draw()
        .map_err(err)?;
    chart
        .draw_series(LineSeries::new(
            [(0.0, 0.0), (max_x, max_x)],
            BLACK.mix(0.3),
        ))
        .map_err(err)?
        .label("goodput = offered")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK.mix(0.3)));
    let good: Vec<(f64, f64)> = steps.iter().map(|s| (s.offered, s.goodput())).collect();
    chart
        .draw_series(LineSeries::new(good.clone(), BLUE.stroke_width(2)))
        .map_err(err)?
        .label("goodput")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLUE));
    chart
        .draw_series(good.iter().map(|&p| Circle::new(p, 4, BLUE.filled())))
        .map_err(err)?;
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;

    let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
    let max_ms = steps
        .iter()
        .map(|s| ms(s.admitted_p99).max(ms(s.shed_p99)))
        .fold(1.0, f64::max)
        * 1.15;
    let mut chart = ChartBuilder::on(&lower)
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..max_x, 0.0..max_ms)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("offered (requests/s)")
        .y_desc("p99 latency (ms)")
        .draw()
        .map_err(err)?;
    let admitted: Vec<(f64, f64)> = steps
        .iter()
        .map(|s| (s.offered, ms(s.admitted_p99)))
        .collect();
    chart
        .draw_series(LineSeries::new(admitted, GREEN.stroke_width(2)))
        .map_err(err)?
        .label("p99 admitted (2xx)")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], GREEN));
    let shed: Vec<(f64, f64)> = steps.iter().map(|s| (s.offered, ms(s.shed_p99))).collect();
    chart
        .draw_series(LineSeries::new(shed, RED.stroke_width(2)))
        .map_err(err)?
        .label("p99 shed (503/429)")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], RED));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

fn err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("drawing the plot: {e}")
}
