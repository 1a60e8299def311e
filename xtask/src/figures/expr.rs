//! The value a figure's marker names: a small expression over one JSON result file.
//!
//! ```text
//! expr      := term (('+' | '-') term)*
//! term      := unary (('*' | '/') unary)*
//! unary     := '-' unary | atom
//! atom      := number | '(' expr ')' | ('min' | 'max') '(' expr (',' expr)* ')'
//!            | 'floor' '(' expr ')' | ('sum' | 'count') '(' path ')' | path
//! path      := key ('.' key | '[' selector ']')*
//! selector  := index | '*' | condition (',' condition)*
//! condition := key ('.' key)* ('=' | '^=') value
//! value     := '"' text '"' | text up to the next ',' or ']'
//! ```
//!
//! A path starts at the file's root (`results.rows[tasks=64].ratio`). `[2]` is the third element
//! of an array; `[library=fencelock Mutex, stats.workers=4]` is the one element whose fields
//! match every condition (`=` equal, `^=` starts with): exactly one element must match, so a
//! figure never depends on the order of a file's rows. Inside `sum(…)` and `count(…)` a
//! selector may match any number of elements but none, and `[*]` matches them all:
//! `sum(rows[strategy=fencelock-mutex-fenced].measurement.sections)`.

use serde_json::Value;

/// Evaluates `text` against `json`.
pub(crate) fn evaluate(text: &str, json: &Value) -> Result<f64, String> {
    let mut parser = Parser { text, at: 0, json };
    let value = parser.expr()?;
    parser.skip_spaces();
    if parser.at < text.len() {
        return Err(format!("unexpected {:?}", &text[parser.at..]));
    }
    if value.is_finite() {
        Ok(value)
    } else {
        Err(format!("{text} is not a finite number ({value})"))
    }
}

struct Parser<'a> {
    text: &'a str,
    at: usize,
    json: &'a Value,
}

impl<'a> Parser<'a> {
    fn rest(&self) -> &'a str {
        &self.text[self.at..]
    }

    fn skip_spaces(&mut self) {
        let rest = self.rest();
        self.at += rest.len() - rest.trim_start().len();
    }

    /// Consumes `token` (after spaces) when it comes next.
    fn eat(&mut self, token: &str) -> bool {
        self.skip_spaces();
        if self.rest().starts_with(token) {
            self.at += token.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, token: &str) -> Result<(), String> {
        if self.eat(token) {
            Ok(())
        } else {
            Err(format!("expected {token:?} at {:?}", self.rest()))
        }
    }

    fn expr(&mut self) -> Result<f64, String> {
        let mut value = self.term()?;
        loop {
            if self.eat("+") {
                value += self.term()?;
            } else if self.eat("-") {
                value -= self.term()?;
            } else {
                return Ok(value);
            }
        }
    }

    fn term(&mut self) -> Result<f64, String> {
        let mut value = self.unary()?;
        loop {
            if self.eat("*") {
                value *= self.unary()?;
            } else if self.eat("/") {
                let divisor = self.unary()?;
                if divisor == 0.0 {
                    return Err(format!("division by zero in {:?}", self.text));
                }
                value /= divisor;
            } else {
                return Ok(value);
            }
        }
    }

    fn unary(&mut self) -> Result<f64, String> {
        if self.eat("-") {
            return Ok(-self.unary()?);
        }
        self.atom()
    }

    fn atom(&mut self) -> Result<f64, String> {
        if self.eat("(") {
            let value = self.expr()?;
            self.expect(")")?;
            return Ok(value);
        }
        self.skip_spaces();
        let rest = self.rest();
        if rest.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
            let len = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(rest.len());
            let number = &rest[..len];
            self.at += len;
            return number.parse().map_err(|_| format!("bad number {number:?}"));
        }
        let key = self.key()?;
        if self.rest().starts_with('(') {
            self.at += 1;
            let value = match key.as_str() {
                "min" | "max" => {
                    let mut values = vec![self.expr()?];
                    while self.eat(",") {
                        values.push(self.expr()?);
                    }
                    let pick = if key == "min" { f64::min } else { f64::max };
                    let first = values[0];
                    values.into_iter().fold(first, pick)
                }
                "floor" => self.expr()?.floor(),
                "sum" | "count" => {
                    let first = self.key()?;
                    let values = self.path(first, true)?;
                    if key == "sum" {
                        values.iter().sum()
                    } else {
                        values.len() as f64
                    }
                }
                other => return Err(format!("unknown function {other}()")),
            };
            self.expect(")")?;
            return Ok(value);
        }
        let values = self.path(key, false)?;
        Ok(values[0])
    }

    /// A JSON key: letters, digits and `_`.
    fn key(&mut self) -> Result<String, String> {
        self.skip_spaces();
        let rest = self.rest();
        let len = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if len == 0 {
            return Err(format!("expected a number, a key or '(' at {rest:?}"));
        }
        self.at += len;
        Ok(rest[..len].to_owned())
    }

    /// The numbers `first` and the path after it name: one, or with `many` every match.
    fn path(&mut self, first: String, many: bool) -> Result<Vec<f64>, String> {
        let mut written = first.clone();
        let mut values: Vec<&Value> = vec![field(self.json, &first, &written)?];
        loop {
            if self.rest().starts_with('.') {
                self.at += 1;
                let key = self.key()?;
                written.push('.');
                written.push_str(&key);
                values = values
                    .into_iter()
                    .map(|v| field(v, &key, &written))
                    .collect::<Result<_, _>>()?;
            } else if self.rest().starts_with('[') {
                let end = self.selector_end()?;
                let selector = &self.text[self.at + 1..end];
                self.at = end + 1;
                written.push_str(&format!("[{selector}]"));
                let mut next = Vec::new();
                for value in values {
                    next.extend(select(value, selector, &written, many)?);
                }
                if next.is_empty() {
                    return Err(format!("{written}: no element matches"));
                }
                values = next;
            } else {
                break;
            }
        }
        values
            .into_iter()
            .map(|value| match value {
                Value::Number(n) => n
                    .as_f64()
                    .ok_or_else(|| format!("{written} is not a number")),
                other => Err(format!("{written} is {other}, not a number")),
            })
            .collect()
    }

    /// The position of the `]` closing the selector that starts here, quotes respected.
    fn selector_end(&self) -> Result<usize, String> {
        let mut quoted = false;
        for (i, c) in self.rest().char_indices().skip(1) {
            match c {
                '"' => quoted = !quoted,
                ']' if !quoted => return Ok(self.at + i),
                _ => {}
            }
        }
        Err(format!("unclosed '[' at {:?}", self.rest()))
    }
}

fn field<'v>(value: &'v Value, key: &str, written: &str) -> Result<&'v Value, String> {
    value
        .get(key)
        .ok_or_else(|| format!("{written}: no such field"))
}

/// The elements of the array `value` that `selector` names: exactly one, or with `many` every
/// match.
fn select<'v>(
    value: &'v Value,
    selector: &str,
    written: &str,
    many: bool,
) -> Result<Vec<&'v Value>, String> {
    let items = value
        .as_array()
        .ok_or_else(|| format!("{written}: not an array"))?;
    if let Ok(index) = selector.trim().parse::<usize>() {
        return items
            .get(index)
            .map(|item| vec![item])
            .ok_or_else(|| format!("{written}: the array has {} elements", items.len()));
    }
    if selector.trim() == "*" {
        return if many {
            Ok(items.iter().collect())
        } else {
            Err(format!("{written}: [*] only inside sum() or count()"))
        };
    }
    let conditions = conditions(selector)?;
    let matching: Vec<&Value> = items
        .iter()
        .filter(|item| conditions.iter().all(|c| c.holds(item)))
        .collect();
    if many || matching.len() == 1 {
        Ok(matching)
    } else {
        Err(format!(
            "{written}: {} elements match, not exactly one",
            matching.len()
        ))
    }
}

/// `key.key = value` or `key ^= value`.
struct Condition {
    path: Vec<String>,
    prefix: bool,
    value: String,
}

impl Condition {
    fn holds(&self, item: &Value) -> bool {
        let mut value = item;
        for key in &self.path {
            match value.get(key) {
                Some(inner) => value = inner,
                None => return false,
            }
        }
        match value {
            Value::String(s) if self.prefix => s.starts_with(&self.value),
            Value::String(s) => *s == self.value,
            Value::Number(n) => !self.prefix && self.value.parse::<f64>().ok() == n.as_f64(),
            Value::Bool(b) => !self.prefix && self.value == b.to_string(),
            _ => false,
        }
    }
}

fn conditions(selector: &str) -> Result<Vec<Condition>, String> {
    let mut conditions = Vec::new();
    let mut rest = selector.trim_start();
    while !rest.is_empty() {
        let eq = rest
            .find('=')
            .ok_or_else(|| format!("expected key=value in [{selector}]"))?;
        let (key, prefix) = match rest[..eq].strip_suffix('^') {
            Some(key) => (key, true),
            None => (&rest[..eq], false),
        };
        let path: Vec<String> = key.trim().split('.').map(str::to_owned).collect();
        if path.iter().any(String::is_empty) {
            return Err(format!("bad key {key:?} in [{selector}]"));
        }
        let after = rest[eq + 1..].trim_start();
        let (value, next) = if let Some(quoted) = after.strip_prefix('"') {
            let close = quoted
                .find('"')
                .ok_or_else(|| format!("unclosed quote in [{selector}]"))?;
            let next = quoted[close + 1..].trim_start();
            (quoted[..close].to_owned(), next)
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (after[..end].trim().to_owned(), &after[end..])
        };
        conditions.push(Condition {
            path,
            prefix,
            value,
        });
        rest = match next.strip_prefix(',') {
            Some(more) => more.trim_start(),
            None if next.is_empty() => "",
            None => return Err(format!("expected ',' or ']' at {next:?} in [{selector}]")),
        };
    }
    if conditions.is_empty() {
        return Err("an empty selector []".to_owned());
    }
    Ok(conditions)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> Value {
        serde_json::json!({
            "results": {
                "rows": [
                    {"tasks": 1, "ratio": 0.8079, "library": "fencelock Mutex", "stats": {"workers": 4}},
                    {"tasks": 64, "ratio": 0.3589, "library": "rslock, default (3 tries)", "stats": {"workers": 4}},
                    {"tasks": 64, "ratio": 0.5, "library": "rslock, retry 1 ms", "stats": {"workers": 16}},
                ],
                "lease_ms": 3000,
                "missing": null
            }
        })
    }

    fn eval(text: &str) -> Result<f64, String> {
        evaluate(text, &file())
    }

    /// The error `text` gives.
    fn error(text: &str) -> String {
        eval(text).expect_err(text)
    }

    #[test]
    fn paths_select_by_index_and_by_fields() {
        assert_eq!(eval("results.lease_ms"), Ok(3000.0));
        assert_eq!(eval("results.rows[1].ratio"), Ok(0.3589));
        assert_eq!(eval("results.rows[tasks=1].ratio"), Ok(0.8079));
        assert_eq!(
            eval("results.rows[tasks=64, stats.workers=16].ratio"),
            Ok(0.5)
        );
        assert_eq!(
            eval("results.rows[library=\"rslock, default (3 tries)\"].tasks"),
            Ok(64.0)
        );
        assert_eq!(
            eval("results.rows[library^=\"rslock, retry\"].ratio"),
            Ok(0.5)
        );
        assert_eq!(eval("results.rows[library=fencelock Mutex].tasks"), Ok(1.0));
    }

    #[test]
    fn arithmetic_follows_precedence() {
        assert_eq!(eval("results.lease_ms / 1000 * 2 / 3"), Ok(2.0));
        assert_eq!(eval("1 + 2 * 3"), Ok(7.0));
        assert_eq!(eval("(1 + 2) * 3"), Ok(9.0));
        assert_eq!(eval("-2 + 5"), Ok(3.0));
        assert_eq!(eval("10 - 4 - 3"), Ok(3.0));
        assert_eq!(
            eval("min(results.rows[0].ratio, results.rows[2].ratio)"),
            Ok(0.5)
        );
        assert_eq!(eval("max(1, 7, 3)"), Ok(7.0));
        assert_eq!(eval("floor(results.lease_ms / 7)"), Ok(428.0));
        assert_eq!(eval("sum(results.rows[stats.workers=4].tasks)"), Ok(65.0));
        assert_eq!(eval("sum(results.rows[*].stats.workers)"), Ok(24.0));
        assert_eq!(eval("count(results.rows[*].tasks)"), Ok(3.0));
        assert_eq!(eval("count(results.rows[stats.workers=4].tasks)"), Ok(2.0));
    }

    #[test]
    fn ambiguous_or_missing_values_are_errors() {
        let ambiguous = error("results.rows[tasks=64].ratio");
        assert!(ambiguous.contains("2 elements match"), "{ambiguous}");
        assert!(error("results.rows[tasks=2].ratio").contains("0 elements match"));
        assert!(error("results.nothing").contains("no such field"));
        assert!(error("results.missing").contains("not a number"));
        assert!(error("results.rows[7].ratio").contains("3 elements"));
        assert!(error("results.rows").contains("not a number"));
        assert!(error("1 / 0").contains("division by zero"));
        assert!(eval("1 +").is_err());
        assert!(eval("results.rows[tasks=1").is_err());
        assert!(eval("2 3").is_err());
        assert!(error("results.rows[*].ratio").contains("only inside"));
        assert!(error("sum(results.rows[tasks=3].ratio)").contains("no element matches"));
        assert!(error("median(1)").contains("unknown function"));
    }
}
