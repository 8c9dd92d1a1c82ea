//! A timeline as plain text, the way the lesson prints its loops: one row
//! per tick or attempt, columns aligned, nothing but spaces between them,
//! so the output pastes into a terminal, a log or a Markdown code block.

use std::fmt::Write as _;

/// One table of a scene: a title, column headings and rows of cells.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Timeline {
    /// What the table shows (printed above it).
    pub title: String,
    /// The column headings.
    pub columns: Vec<String>,
    /// The rows; each has one cell per column (missing cells print empty).
    pub rows: Vec<Vec<String>>,
}

impl Timeline {
    /// An empty table titled `title` with `columns`.
    pub fn new(title: impl Into<String>, columns: &[&str]) -> Self {
        Self {
            title: title.into(),
            columns: columns.iter().map(|c| (*c).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends one row.
    pub fn push<I, S>(&mut self, cells: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    /// The cells of column `name`, top to bottom (empty when there is no
    /// such column): what tests read instead of parsing the text.
    pub fn column(&self, name: &str) -> Vec<&str> {
        let Some(at) = self.columns.iter().position(|c| c == name) else {
            return Vec::new();
        };
        self.rows
            .iter()
            .map(|row| row.get(at).map_or("", String::as_str))
            .collect()
    }

    /// The table as text: the title, the headings, a rule, the rows; each
    /// column as wide as its widest cell, two spaces between columns, no
    /// trailing spaces.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.columns.iter().map(|c| c.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                let len = cell.chars().count();
                match widths.get_mut(i) {
                    Some(w) => *w = (*w).max(len),
                    None => widths.push(len),
                }
            }
        }
        let mut out = String::new();
        if !self.title.is_empty() {
            out.push_str(&self.title);
            out.push('\n');
        }
        let line = |cells: &[String]| {
            let mut text = String::new();
            for (i, width) in widths.iter().enumerate() {
                let cell = cells.get(i).map_or("", String::as_str);
                if i > 0 {
                    text.push_str("  ");
                }
                let _ = write!(text, "{cell:<width$}");
            }
            text.trim_end().to_owned()
        };
        out.push_str(&line(&self.columns));
        out.push('\n');
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        out.push_str(&line(&rule));
        out.push('\n');
        for row in &self.rows {
            out.push_str(&line(row));
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_aligned_to_their_widest_cell() {
        let mut t = Timeline::new("breaker", &["tick", "result", "state"]);
        t.push(["0", "error", "closed"]);
        t.push(["10", "refused at once", "open"]);
        assert_eq!(
            t.render(),
            "breaker\n\
             tick  result           state\n\
             ----  ---------------  ------\n\
             0     error            closed\n\
             10    refused at once  open\n"
        );
        assert_eq!(t.column("state"), ["closed", "open"]);
        assert!(t.column("nope").is_empty());
    }
}
