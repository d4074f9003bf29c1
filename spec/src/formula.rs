//! Formulas of model cells (SPEC §2): lexer, parser and syntax tree.
//!
//! Precedence, loosest first: comparisons `< <= > >= = <>` (1 or 0), `+ -`, `* /`,
//! unary `-`, `^` (right-associative, tighter than unary minus: `-2^2` is −4). Calls:
//! `IF(c,a,b)`, `MIN MAX SUM AVERAGE` (variadic, may take ranges `a:b`), `ABS`, `SQRT`,
//! `ROUND(x,digits)`. Function names are case-insensitive; cell names are not. A
//! matrix is read one value at a time: `tariff[row, col]`, both indices expressions,
//! counted from 0 (docs/grdx.md, "Matrices in models").
//!
//! Every node and every error carries a byte span *within the formula text*; the
//! topology parser shifts it to the file so a diagnostic points inside the string.
//! Name resolution (unknown names, ranges, cycles) needs the whole model and happens in
//! `validate`.

use std::fmt;
use std::ops::Range;

use crate::limits::FORMULA_NESTING_MAX;

/// A byte range within one formula's text.
pub type Span = Range<usize>;

/// A parsed formula node.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ExprKind {
    /// A finite literal.
    Number(f64),
    /// A reference to an input or cell of the same model.
    Name(String),
    /// `first:last`: every input and cell declared from `first` to `last` in file order.
    /// Only an argument of a variadic function.
    Range {
        first: NameRef,
        last: NameRef,
    },
    Negate(Box<Expr>),
    Binary(BinaryOp, Box<Expr>, Box<Expr>),
    Call(Function, Vec<Expr>),
    /// `matrix[row, col]`: one value of a matrix item, row then column, from 0.
    Index {
        matrix: NameRef,
        row: Box<Expr>,
        col: Box<Expr>,
    },
}

/// A name inside a range, with its own span.
#[derive(Debug, Clone, PartialEq)]
pub struct NameRef {
    pub name: String,
    pub span: Span,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Subtract,
    Multiply,
    Divide,
    Power,
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
    Equal,
    NotEqual,
}

impl BinaryOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinaryOp::Add => "+",
            BinaryOp::Subtract => "-",
            BinaryOp::Multiply => "*",
            BinaryOp::Divide => "/",
            BinaryOp::Power => "^",
            BinaryOp::Less => "<",
            BinaryOp::LessOrEqual => "<=",
            BinaryOp::Greater => ">",
            BinaryOp::GreaterOrEqual => ">=",
            BinaryOp::Equal => "=",
            BinaryOp::NotEqual => "<>",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Function {
    If,
    Min,
    Max,
    Sum,
    Average,
    Abs,
    Sqrt,
    Round,
}

impl Function {
    pub const ALL: [Function; 8] = [
        Function::If,
        Function::Min,
        Function::Max,
        Function::Sum,
        Function::Average,
        Function::Abs,
        Function::Sqrt,
        Function::Round,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Function::If => "IF",
            Function::Min => "MIN",
            Function::Max => "MAX",
            Function::Sum => "SUM",
            Function::Average => "AVERAGE",
            Function::Abs => "ABS",
            Function::Sqrt => "SQRT",
            Function::Round => "ROUND",
        }
    }

    /// Case-insensitive lookup.
    pub fn from_name(name: &str) -> Option<Function> {
        Function::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(name))
    }

    /// Variadic functions take one or more arguments, ranges among them.
    pub fn is_variadic(self) -> bool {
        matches!(
            self,
            Function::Min | Function::Max | Function::Sum | Function::Average
        )
    }

    /// The exact argument count of a fixed-arity function.
    pub fn arity(self) -> Option<usize> {
        match self {
            Function::If => Some(3),
            Function::Abs | Function::Sqrt => Some(1),
            Function::Round => Some(2),
            Function::Min | Function::Max | Function::Sum | Function::Average => None,
        }
    }
}

impl fmt::Display for Function {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Expr {
    /// Counted operations of this formula (the admission rule of `docs/models.md`):
    /// every literal, name reference, range, operator, function call and matrix read
    /// counts 1.
    pub fn operations(&self) -> u64 {
        match &self.kind {
            ExprKind::Number(_) | ExprKind::Name(_) | ExprKind::Range { .. } => 1,
            ExprKind::Negate(inner) => 1 + inner.operations(),
            ExprKind::Binary(_, left, right)
            | ExprKind::Index {
                row: left,
                col: right,
                ..
            } => 1 + left.operations() + right.operations(),
            ExprKind::Call(_, args) => 1 + args.iter().map(Expr::operations).sum::<u64>(),
        }
    }

    /// Calls `visit` for every node, parents before children, left to right.
    pub fn walk<'a>(&'a self, visit: &mut dyn FnMut(&'a Expr)) {
        visit(self);
        match &self.kind {
            ExprKind::Number(_) | ExprKind::Name(_) | ExprKind::Range { .. } => {}
            ExprKind::Negate(inner) => inner.walk(visit),
            ExprKind::Binary(_, left, right)
            | ExprKind::Index {
                row: left,
                col: right,
                ..
            } => {
                left.walk(visit);
                right.walk(visit);
            }
            ExprKind::Call(_, args) => args.iter().for_each(|a| a.walk(visit)),
        }
    }
}

/// A syntax error inside a formula; `span` is relative to the formula text.
#[derive(Debug, Clone, PartialEq)]
pub struct FormulaError {
    pub message: String,
    pub span: Span,
    pub help: Option<String>,
}

impl fmt::Display for FormulaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for FormulaError {}

fn error(message: impl Into<String>, span: Span, help: Option<&str>) -> FormulaError {
    FormulaError {
        message: message.into(),
        span,
        help: help.map(str::to_owned),
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Number(f64),
    Name(String),
    Op(&'static str),
    End,
}

const OPERATORS: [&str; 17] = [
    "<=", ">=", "<>", "<", ">", "=", "+", "-", "*", "/", "^", "(", ")", ",", ":", "[", "]",
];

fn is_name_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_'
}

fn is_name_continue(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Whether `name` can be referenced from a formula (the rule for input and cell names).
pub fn is_formula_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && is_name_start(bytes[0])
        && bytes.iter().all(|&c| is_name_continue(c))
        && Function::from_name(name).is_none()
}

fn tokenize(text: &str) -> Result<Vec<(Token, Span)>, FormulaError> {
    let bytes = text.as_bytes();
    let mut tokens = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let c = bytes[at];
        if c.is_ascii_whitespace() {
            at += 1;
            continue;
        }
        let start = at;
        if c.is_ascii_digit() || (c == b'.' && bytes.get(at + 1).is_some_and(u8::is_ascii_digit)) {
            while at < bytes.len() && bytes[at].is_ascii_digit() {
                at += 1;
            }
            if at < bytes.len() && bytes[at] == b'.' {
                at += 1;
                while at < bytes.len() && bytes[at].is_ascii_digit() {
                    at += 1;
                }
            }
            if at < bytes.len() && (bytes[at] == b'e' || bytes[at] == b'E') {
                let mut look = at + 1;
                if look < bytes.len() && (bytes[look] == b'+' || bytes[look] == b'-') {
                    look += 1;
                }
                if look < bytes.len() && bytes[look].is_ascii_digit() {
                    at = look;
                    while at < bytes.len() && bytes[at].is_ascii_digit() {
                        at += 1;
                    }
                }
            }
            if at < bytes.len() && is_name_start(bytes[at]) {
                let mut end = at;
                while end < bytes.len() && is_name_continue(bytes[end]) {
                    end += 1;
                }
                return Err(error(
                    format!("`{}` is neither a number nor a name", &text[start..end]),
                    start..end,
                    Some("names start with a letter or `_`; numbers look like 12, 0.5 or 1e3"),
                ));
            }
            let literal = &text[start..at];
            let value: f64 = literal
                .parse()
                .map_err(|_| error(format!("`{literal}` is not a number"), start..at, None))?;
            if !value.is_finite() {
                return Err(error(
                    format!("`{literal}` is not a finite number"),
                    start..at,
                    Some("values are finite f64; this literal overflows"),
                ));
            }
            tokens.push((Token::Number(value), start..at));
            continue;
        }
        if is_name_start(c) {
            while at < bytes.len() && is_name_continue(bytes[at]) {
                at += 1;
            }
            tokens.push((Token::Name(text[start..at].to_owned()), start..at));
            continue;
        }
        if let Some(op) = OPERATORS.iter().find(|op| text[at..].starts_with(**op)) {
            at += op.len();
            tokens.push((Token::Op(op), start..at));
            continue;
        }
        let width = text[at..].chars().next().map_or(1, char::len_utf8);
        return Err(error(
            format!("unexpected character `{}`", &text[at..at + width]),
            at..at + width,
            Some(
                "formulas use numbers, names, ( ), + - * / ^, comparisons, functions and matrix reads m[row, col]",
            ),
        ));
    }
    tokens.push((Token::End, bytes.len()..bytes.len()));
    Ok(tokens)
}

struct Parser {
    tokens: Vec<(Token, Span)>,
    at: usize,
    depth: usize,
}

/// Parses one formula.
pub fn parse(text: &str) -> Result<Expr, FormulaError> {
    let tokens = tokenize(text)?;
    let mut parser = Parser {
        tokens,
        at: 0,
        depth: 0,
    };
    if matches!(parser.peek(), Token::End) {
        return Err(error(
            "empty formula",
            0..text.len(),
            Some("write an expression, for example `a + 1`"),
        ));
    }
    let expr = parser.comparison()?;
    match parser.peek() {
        Token::End => Ok(expr),
        _ => {
            let (token, span) = parser.tokens[parser.at].clone();
            Err(error(
                format!(
                    "unexpected {} after a complete expression",
                    describe(&token)
                ),
                span,
                Some("an operator may be missing"),
            ))
        }
    }
}

fn describe(token: &Token) -> String {
    match token {
        Token::Number(_) => "number".to_owned(),
        Token::Name(name) => format!("name `{name}`"),
        Token::Op(op) => format!("`{op}`"),
        Token::End => "end of formula".to_owned(),
    }
}

impl Parser {
    fn peek(&self) -> &Token {
        &self.tokens[self.at].0
    }

    fn span(&self) -> Span {
        self.tokens[self.at].1.clone()
    }

    fn next(&mut self) -> (Token, Span) {
        let token = self.tokens[self.at].clone();
        if !matches!(token.0, Token::End) {
            self.at += 1;
        }
        token
    }

    fn eat(&mut self, op: &str) -> bool {
        if matches!(self.peek(), Token::Op(o) if *o == op) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn enter(&mut self, span: &Span) -> Result<(), FormulaError> {
        self.depth += 1;
        if self.depth > FORMULA_NESTING_MAX {
            return Err(error(
                format!("formula nests deeper than FORMULA_NESTING_MAX ({FORMULA_NESTING_MAX})"),
                span.clone(),
                Some("split the formula into several cells"),
            ));
        }
        Ok(())
    }

    fn comparison(&mut self) -> Result<Expr, FormulaError> {
        let mut left = self.additive()?;
        loop {
            let op = match self.peek() {
                Token::Op("<") => BinaryOp::Less,
                Token::Op("<=") => BinaryOp::LessOrEqual,
                Token::Op(">") => BinaryOp::Greater,
                Token::Op(">=") => BinaryOp::GreaterOrEqual,
                Token::Op("=") => BinaryOp::Equal,
                Token::Op("<>") => BinaryOp::NotEqual,
                _ => return Ok(left),
            };
            self.at += 1;
            let right = self.additive()?;
            left = binary(op, left, right);
        }
    }

    fn additive(&mut self) -> Result<Expr, FormulaError> {
        let mut left = self.multiplicative()?;
        loop {
            let op = match self.peek() {
                Token::Op("+") => BinaryOp::Add,
                Token::Op("-") => BinaryOp::Subtract,
                _ => return Ok(left),
            };
            self.at += 1;
            let right = self.multiplicative()?;
            left = binary(op, left, right);
        }
    }

    fn multiplicative(&mut self) -> Result<Expr, FormulaError> {
        let mut left = self.unary()?;
        loop {
            let op = match self.peek() {
                Token::Op("*") => BinaryOp::Multiply,
                Token::Op("/") => BinaryOp::Divide,
                _ => return Ok(left),
            };
            self.at += 1;
            let right = self.unary()?;
            left = binary(op, left, right);
        }
    }

    fn unary(&mut self) -> Result<Expr, FormulaError> {
        let start = self.span();
        if self.eat("-") {
            self.enter(&start)?;
            let inner = self.unary()?;
            self.depth -= 1;
            let span = start.start..inner.span.end;
            return Ok(Expr {
                kind: ExprKind::Negate(Box::new(inner)),
                span,
            });
        }
        self.power()
    }

    fn power(&mut self) -> Result<Expr, FormulaError> {
        let base = self.primary()?;
        if self.eat("^") {
            let start = base.span.clone();
            self.enter(&start)?;
            // The exponent may itself be negated or raised: `2^-1`, `2^3^2` = 2^(3^2).
            let exponent = self.unary()?;
            self.depth -= 1;
            return Ok(binary(BinaryOp::Power, base, exponent));
        }
        Ok(base)
    }

    fn primary(&mut self) -> Result<Expr, FormulaError> {
        let (token, span) = self.next();
        match token {
            Token::Number(value) => Ok(Expr {
                kind: ExprKind::Number(value),
                span,
            }),
            Token::Name(name) => {
                if matches!(self.peek(), Token::Op("(")) {
                    return self.call(name, span);
                }
                if matches!(self.peek(), Token::Op("[")) {
                    return self.index(name, span);
                }
                if matches!(self.peek(), Token::Op(":")) {
                    let colon = self.span();
                    return Err(error(
                        format!(
                            "a range `{name}:…` is only allowed as an argument of MIN, MAX, SUM or AVERAGE"
                        ),
                        span.start..colon.end,
                        Some("wrap it in a variadic function, for example SUM(a:b)"),
                    ));
                }
                Ok(Expr {
                    kind: ExprKind::Name(name),
                    span,
                })
            }
            Token::Op("(") => {
                self.enter(&span)?;
                let inner = self.comparison()?;
                self.depth -= 1;
                let close = self.span();
                if !self.eat(")") {
                    return Err(error(
                        format!(
                            "expected `)` to close the `(` here, found {}",
                            describe(self.peek())
                        ),
                        close,
                        Some("parentheses must balance"),
                    ));
                }
                Ok(Expr {
                    kind: inner.kind,
                    span: span.start..close.end,
                })
            }
            Token::End => Err(error(
                "formula ends where a value was expected",
                span,
                Some("an operand is missing after the last operator"),
            )),
            other => Err(error(
                format!(
                    "expected a number, a name or `(`, found {}",
                    describe(&other)
                ),
                span,
                None,
            )),
        }
    }

    /// `NAME[row, col]`, the `[` next: one value of a matrix.
    fn index(&mut self, name: String, name_span: Span) -> Result<Expr, FormulaError> {
        let open = self.span();
        self.at += 1; // `[`
        self.enter(&open)?;
        let row = self.comparison()?;
        let comma = self.span();
        if !self.eat(",") {
            return Err(error(
                format!(
                    "expected `,` after the row of `{name}[…]`, found {}",
                    describe(self.peek())
                ),
                comma,
                Some("a matrix is read as m[row, col], both counted from 0"),
            ));
        }
        let col = self.comparison()?;
        self.depth -= 1;
        let close = self.span();
        if !self.eat("]") {
            return Err(error(
                format!(
                    "expected `]` to close `{name}[`, found {}",
                    describe(self.peek())
                ),
                close,
                Some("a matrix is read as m[row, col]: two indices, no more"),
            ));
        }
        Ok(Expr {
            span: name_span.start..close.end,
            kind: ExprKind::Index {
                matrix: NameRef {
                    name,
                    span: name_span,
                },
                row: Box::new(row),
                col: Box::new(col),
            },
        })
    }

    fn call(&mut self, name: String, name_span: Span) -> Result<Expr, FormulaError> {
        let Some(function) = Function::from_name(&name) else {
            return Err(error(
                format!("unknown function `{name}`"),
                name_span,
                Some("functions: IF, MIN, MAX, SUM, AVERAGE, ABS, SQRT, ROUND"),
            ));
        };
        let open = self.span();
        self.at += 1; // `(`
        self.enter(&open)?;
        let mut args = Vec::new();
        if !matches!(self.peek(), Token::Op(")")) {
            loop {
                args.push(self.argument(function)?);
                if !self.eat(",") {
                    break;
                }
            }
        }
        self.depth -= 1;
        let close = self.span();
        if !self.eat(")") {
            return Err(error(
                format!(
                    "expected `,` or `)` in the arguments of {function}, found {}",
                    describe(self.peek())
                ),
                close,
                Some("arguments are separated by `,` and closed by `)`"),
            ));
        }
        let span = name_span.start..close.end;
        match function.arity() {
            Some(arity) if arity != args.len() => Err(error(
                format!(
                    "{function} takes {arity} argument{}, found {}",
                    if arity == 1 { "" } else { "s" },
                    args.len()
                ),
                span,
                Some(match function {
                    Function::If => "IF(condition, value_if_true, value_if_false)",
                    Function::Round => "ROUND(value, digits)",
                    _ => "this function takes one value",
                }),
            )),
            None if args.is_empty() => Err(error(
                format!("{function} needs at least one argument"),
                span,
                Some("for example SUM(a, b) or SUM(a:d)"),
            )),
            _ => Ok(Expr {
                kind: ExprKind::Call(function, args),
                span,
            }),
        }
    }

    fn argument(&mut self, function: Function) -> Result<Expr, FormulaError> {
        // A range is `NAME : NAME` directly as an argument.
        if let (Token::Name(first), Some((Token::Op(":"), _))) =
            (self.peek().clone(), self.tokens.get(self.at + 1))
        {
            let first_span = self.span();
            if !function.is_variadic() {
                return Err(error(
                    format!("{function} does not take a range"),
                    first_span.start..self.tokens[self.at + 1].1.end,
                    Some("ranges are arguments of MIN, MAX, SUM or AVERAGE"),
                ));
            }
            self.at += 2;
            let (token, last_span) = self.next();
            let Token::Name(last) = token else {
                return Err(error(
                    format!(
                        "expected a name after `{first}:`, found {}",
                        describe(&token)
                    ),
                    last_span,
                    Some("a range is `first:last`"),
                ));
            };
            return Ok(Expr {
                span: first_span.start..last_span.end,
                kind: ExprKind::Range {
                    first: NameRef {
                        name: first,
                        span: first_span,
                    },
                    last: NameRef {
                        name: last,
                        span: last_span,
                    },
                },
            });
        }
        self.comparison()
    }
}

fn binary(op: BinaryOp, left: Expr, right: Expr) -> Expr {
    let span = left.span.start..right.span.end;
    Expr {
        kind: ExprKind::Binary(op, Box::new(left), Box::new(right)),
        span,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(expr: &Expr) -> String {
        match &expr.kind {
            ExprKind::Number(n) => format!("{n}"),
            ExprKind::Name(n) => n.clone(),
            ExprKind::Range { first, last } => format!("{}:{}", first.name, last.name),
            ExprKind::Negate(inner) => format!("(-{})", shape(inner)),
            ExprKind::Binary(op, l, r) => format!("({} {} {})", shape(l), op.symbol(), shape(r)),
            ExprKind::Call(f, args) => format!(
                "{f}({})",
                args.iter().map(shape).collect::<Vec<_>>().join(", ")
            ),
            ExprKind::Index { matrix, row, col } => {
                format!("{}[{}, {}]", matrix.name, shape(row), shape(col))
            }
        }
    }

    #[test]
    fn matrix_reads_parse_and_count() {
        let expr = parse("tariff[hour, day + 1] * 1.2").unwrap();
        assert_eq!(shape(&expr), "(tariff[hour, (day + 1)] * 1.2)");
        // tariff[…] 1, hour 1, day + 1 3, * 1, 1.2 1 = 7
        assert_eq!(expr.operations(), 7);
        let ExprKind::Binary(_, read, _) = &expr.kind else {
            panic!("{expr:?}")
        };
        assert_eq!(read.span, 0..21);
        assert_eq!(shape(&parse("-m[0,0]^2").unwrap()), "(-(m[0, 0] ^ 2))");
        assert_eq!(
            shape(&parse("SUM(m[a, b], m[1, IF(c, 2, 3)])").unwrap()),
            "SUM(m[a, b], m[1, IF(c, 2, 3)])"
        );
        for (text, fragment, at) in [
            ("m[1]", "expected `,` after the row", 3),
            ("m[1, 2", "expected `]` to close `m[`", 6),
            ("m[1, 2, 3]", "expected `]` to close `m[`", 6),
            ("m[]", "expected a number, a name or `(`", 2),
            ("m[1, 2]]", "unexpected `]` after a complete expression", 7),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.message.contains(fragment), "{text}: {}", e.message);
            assert_eq!(e.span.start, at, "{text}: {e:?}");
        }
    }

    #[test]
    fn precedence() {
        let cases = [
            ("-2^2", "(-(2 ^ 2))"),
            ("2^3^2", "(2 ^ (3 ^ 2))"),
            ("2^-1", "(2 ^ (-1))"),
            ("1 + 2 * 3", "(1 + (2 * 3))"),
            ("1 - 2 - 3", "((1 - 2) - 3)"),
            ("a + 1 > b * 2", "((a + 1) > (b * 2))"),
            ("a <> b = c", "((a <> b) = c)"),
            ("sum(a:b, 2)", "SUM(a:b, 2)"),
            ("IF(a, -b, (c))", "IF(a, (-b), c)"),
            ("1e3 + .5", "(1000 + 0.5)"),
        ];
        for (text, expected) in cases {
            assert_eq!(shape(&parse(text).unwrap()), expected, "{text}");
        }
    }

    #[test]
    fn operations_count_every_node() {
        // a, 9, *, 5, /, 32, + = 7
        assert_eq!(parse("a * 9 / 5 + 32").unwrap().operations(), 7);
        // IF, >, a, b, -, a, b, 0 = 8
        assert_eq!(parse("IF(a > b, a - b, 0)").unwrap().operations(), 8);
        // SUM, range = 2
        assert_eq!(parse("SUM(a:d)").unwrap().operations(), 2);
    }

    #[test]
    fn errors_point_inside_the_formula() {
        let err = parse("a + * b").unwrap_err();
        assert_eq!(err.span, 4..5);
        let err = parse("FOO(a)").unwrap_err();
        assert_eq!(err.span, 0..3);
        let err = parse("(a + b").unwrap_err();
        assert_eq!(err.span, 6..6);
        let err = parse("ABS(a:b)").unwrap_err();
        assert_eq!(err.span, 4..6);
        let err = parse("ROUND(a)").unwrap_err();
        assert_eq!(err.span, 0..8);
        let err = parse("a:b").unwrap_err();
        assert_eq!(err.span, 0..2);
        let err = parse("1e999").unwrap_err();
        assert_eq!(err.span, 0..5);
    }

    #[test]
    fn nesting_is_bounded() {
        let deep = format!("{}1{}", "(".repeat(100), ")".repeat(100));
        let err = parse(&deep).unwrap_err();
        assert!(
            err.message.contains("FORMULA_NESTING_MAX"),
            "{}",
            err.message
        );
        let deep = format!("{}1", "-".repeat(100));
        assert!(parse(&deep).is_err());
    }
}
