//! CEL for device selectors: Kubernetes' DRA environment on cel-rust.
//!
//! The `device` variable has `driver`, `allowMultipleAllocations`,
//! `attributes[domain][name]` (bool, int, string, or a semver for version
//! attributes) and `capacity[domain][name]` (quantities). An attribute or
//! capacity written without a domain is under the driver's domain; looking
//! up a domain the device has nothing in yields an empty map, as upstream's
//! `newStringInterfaceMapWithDefault` does, so `device.attributes["x"].y`
//! is a "no such key" runtime error, not a missing-domain one.
//!
//! Kubernetes' `semver()` and `quantity()` libraries are added to the
//! environment as overloads through cel's API (with the methods used in
//! practice), and the strings extension as Kubernetes' base environment has.
//!
//! **Cost.** cel-rust has no runtime cost accounting, so the bound is
//! static: each expression's worst-case cost is estimated when it is
//! compiled (every node costs 1; a comprehension's body runs once per
//! element of its range, bounded by the longer of the device limits — 64 —
//! and the longest literal in the expression). An expression whose bound
//! exceeds upstream's runtime limit (`CELSelectorExpressionMaxCost`,
//! 1,000,000) is not run: evaluating it is a runtime error, as upstream's
//! "actual cost limit exceeded" would be for the expressions that reach it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cel::common::ast::{Expr, IdedExpr};
use cel::common::traits::{Container, Indexer, Iterable, Sizer};
use cel::common::types::{CelBool, CelDouble, CelInt, CelMap, CelMapKey, CelString, Type};
use cel::common::value::{CowVal, StaticVal, Val};
use cel::{Context, Env, ExecutionError, Program, Value};
use thiserror::Error;

use crate::quantity::Quantity;
use crate::semver::Semver;

/// Upstream's runtime cost limit for one selector (`resourceapi.CELSelectorExpressionMaxCost`).
pub const MAX_COST: u64 = 1_000_000;

/// Why a device could not be evaluated.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum CelError {
    /// The expression does not compile.
    #[error("compilation failed: {0}")]
    Compile(String),
    /// Evaluation failed (the message is cel's, enhanced as upstream's `EnhanceRuntimeError`).
    #[error("{0}")]
    Runtime(String),
    /// A version attribute is not a semantic version.
    #[error("attribute {name}: parse semantic version: {message}")]
    Attribute {
        /// The attribute's qualified name.
        name: String,
        /// What is wrong.
        message: String,
    },
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, CelError>;

static SEMVER_TYPE: Type = Type::new_unspecified_type("kubernetes.Semver");
static QUANTITY_TYPE: Type = Type::new_unspecified_type("kubernetes.Quantity");

/// A semantic version as a CEL value (`semver("1.2.3")`, version attributes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SemverVal(pub Semver);

impl Val for SemverVal {
    fn get_type(&self) -> &Type {
        &SEMVER_TYPE
    }
    fn cel_type() -> &'static Type {
        &SEMVER_TYPE
    }
    fn equals(&self, other: &dyn Val) -> bool {
        other.downcast_ref::<SemverVal>().is_some_and(|o| o.0.cmp(&self.0).is_eq())
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}
impl StaticVal for SemverVal {}

/// A quantity as a CEL value (`quantity("1Gi")`, capacities).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuantityVal(pub Quantity);

impl Val for QuantityVal {
    fn get_type(&self) -> &Type {
        &QUANTITY_TYPE
    }
    fn cel_type() -> &'static Type {
        &QUANTITY_TYPE
    }
    fn equals(&self, other: &dyn Val) -> bool {
        other.downcast_ref::<QuantityVal>().is_some_and(|o| o.0 == self.0)
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}
impl StaticVal for QuantityVal {}

/// A map of maps keyed by domain whose missing keys read as an empty map.
#[derive(Clone, Debug)]
struct DomainMap {
    inner: Arc<CelMap<'static>>,
    empty: Arc<CelMap<'static>>,
}

impl Indexer for DomainMap {
    fn get<'b, 'v>(&'b self, idx: &dyn Val) -> std::result::Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        match self.inner.as_ref().get(idx) {
            Err(ExecutionError::NoSuchKey(_)) => Ok(CowVal::Borrowed(self.empty.as_ref())),
            other => other,
        }
    }
    fn steal<'v>(self: Box<Self>, idx: &dyn Val) -> std::result::Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(idx).map(CowVal::into_owned)
    }
}

impl Val for DomainMap {
    fn get_type(&self) -> &Type {
        self.inner.get_type()
    }
    fn cel_type() -> &'static Type {
        <CelMap<'static> as Val>::cel_type()
    }
    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }
    fn as_container(&self) -> Option<&dyn Container> {
        self.inner.as_container()
    }
    fn as_iterable<'b, 'v>(&'b self) -> Option<&'b (dyn Iterable + 'v)>
    where
        Self: 'v,
    {
        self.inner.as_iterable()
    }
    fn as_sizer(&self) -> Option<&dyn Sizer> {
        self.inner.as_sizer()
    }
    fn equals(&self, other: &dyn Val) -> bool {
        match other.as_any().and_then(|a| a.downcast_ref::<DomainMap>()) {
            Some(o) => self.inner.equals(o.inner.as_ref()),
            None => self.inner.equals(other),
        }
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

static DEVICE_TYPE: Type = Type::new_unspecified_type("kubernetes.DRADevice");

/// The `device` variable: built once per device per allocation attempt,
/// cheap to clone.
#[derive(Clone, Debug)]
pub struct DeviceVal {
    driver: CelString<'static>,
    allow_multiple_allocations: CelBool,
    attributes: DomainMap,
    capacity: DomainMap,
}

impl Indexer for DeviceVal {
    fn get<'b, 'v>(&'b self, idx: &dyn Val) -> std::result::Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        match idx.downcast_ref::<CelString>().map(CelString::inner) {
            Some("driver") => Ok(CowVal::Borrowed(&self.driver)),
            Some("allowMultipleAllocations") => Ok(CowVal::Borrowed(&self.allow_multiple_allocations)),
            Some("attributes") => Ok(CowVal::Borrowed(&self.attributes)),
            Some("capacity") => Ok(CowVal::Borrowed(&self.capacity)),
            Some(other) => Err(ExecutionError::no_such_key(other)),
            None => Err(ExecutionError::no_such_key("device field")),
        }
    }
    fn steal<'v>(self: Box<Self>, idx: &dyn Val) -> std::result::Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(idx).map(CowVal::into_owned)
    }
}

impl Val for DeviceVal {
    fn get_type(&self) -> &Type {
        &DEVICE_TYPE
    }
    fn cel_type() -> &'static Type {
        &DEVICE_TYPE
    }
    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}
impl StaticVal for DeviceVal {}

/// One attribute value for [`DeviceVal::new`].
#[derive(Clone, Copy, Debug)]
pub enum AttrIn<'a> {
    /// bool.
    Bool(bool),
    /// int.
    Int(i64),
    /// string.
    Str(&'a str),
    /// version (parsed as a semver).
    Version(&'a str),
}

fn split_qualified<'a>(name: &'a str, driver: &'a str) -> (&'a str, &'a str) {
    name.split_once('/').unwrap_or((driver, name))
}

impl DeviceVal {
    /// Builds the `device` variable.
    pub fn new<'a>(
        driver: &str,
        allow_multiple_allocations: bool,
        attributes: impl IntoIterator<Item = (&'a str, AttrIn<'a>)>,
        capacity: impl IntoIterator<Item = (&'a str, Quantity)>,
    ) -> Result<Self> {
        let mut attrs: HashMap<String, HashMap<CelMapKey<'static>, Box<dyn Val>>> = HashMap::new();
        for (name, v) in attributes {
            let (domain, id) = split_qualified(name, driver);
            let val: Box<dyn Val> = match v {
                AttrIn::Bool(b) => Box::new(CelBool::from(b)),
                AttrIn::Int(i) => Box::new(CelInt::from(i)),
                AttrIn::Str(s) => Box::new(CelString::from(s.to_string())),
                AttrIn::Version(s) => Box::new(SemverVal(Semver::parse(s).map_err(|e| CelError::Attribute {
                    name: name.to_string(),
                    message: e.to_string(),
                })?)),
            };
            attrs.entry(domain.to_string()).or_default().insert(CelMapKey::from(id.to_string()), val);
        }
        let mut caps: HashMap<String, HashMap<CelMapKey<'static>, Box<dyn Val>>> = HashMap::new();
        for (name, q) in capacity {
            let (domain, id) = split_qualified(name, driver);
            caps.entry(domain.to_string()).or_default().insert(CelMapKey::from(id.to_string()), Box::new(QuantityVal(q)));
        }
        let outer = |m: HashMap<String, HashMap<CelMapKey<'static>, Box<dyn Val>>>| -> CelMap<'static> {
            let mut o: HashMap<CelMapKey<'static>, Box<dyn Val>> = HashMap::new();
            for (d, inner) in m {
                o.insert(CelMapKey::from(d), Box::new(CelMap::from(inner)));
            }
            CelMap::from(o)
        };
        let empty = Arc::new(CelMap::from(HashMap::new()));
        Ok(DeviceVal {
            driver: CelString::from(driver.to_string()),
            allow_multiple_allocations: CelBool::from(allow_multiple_allocations),
            attributes: DomainMap { inner: Arc::new(outer(attrs)), empty: empty.clone() },
            capacity: DomainMap { inner: Arc::new(outer(caps)), empty },
        })
    }
}

// ---- the semver and quantity libraries ----

fn fn_err(f: &str, e: impl ToString) -> ExecutionError {
    ExecutionError::function_error(f, e)
}

fn semver(s: &CelString<'_>) -> std::result::Result<SemverVal, ExecutionError> {
    Semver::parse(s.inner()).map(SemverVal).map_err(|e| fn_err("semver", e))
}

/// `semver(s, true)`: tolerate a leading `v`, missing minor/patch and leading zeros.
fn semver_normalize(s: &CelString<'_>, normalize: &CelBool) -> std::result::Result<SemverVal, ExecutionError> {
    if !*normalize.inner() {
        return semver(s);
    }
    let t = s.inner().strip_prefix('v').unwrap_or(s.inner());
    let (core, rest) = match t.find(['-', '+']) {
        Some(i) => t.split_at(i),
        None => (t, ""),
    };
    let mut parts: Vec<String> =
        core.split('.').map(|p| p.trim_start_matches('0')).map(|p| if p.is_empty() { "0".to_string() } else { p.to_string() }).collect();
    while parts.len() < 3 {
        parts.push("0".into());
    }
    Semver::parse(&format!("{}{rest}", parts.join("."))).map(SemverVal).map_err(|e| fn_err("semver", e))
}

fn is_semver(s: &CelString<'_>) -> CelBool {
    CelBool::from(Semver::parse(s.inner()).is_ok())
}
fn semver_major(v: &SemverVal) -> CelInt {
    CelInt::from(i64::try_from(v.0.major).unwrap_or(i64::MAX))
}
fn semver_minor(v: &SemverVal) -> CelInt {
    CelInt::from(i64::try_from(v.0.minor).unwrap_or(i64::MAX))
}
fn semver_patch(v: &SemverVal) -> CelInt {
    CelInt::from(i64::try_from(v.0.patch).unwrap_or(i64::MAX))
}
fn semver_less(a: &SemverVal, b: &SemverVal) -> CelBool {
    CelBool::from(a.0 < b.0)
}
fn semver_greater(a: &SemverVal, b: &SemverVal) -> CelBool {
    CelBool::from(a.0 > b.0)
}
fn semver_compare(a: &SemverVal, b: &SemverVal) -> CelInt {
    CelInt::from(a.0.cmp(&b.0) as i64)
}

fn quantity(s: &CelString<'_>) -> std::result::Result<QuantityVal, ExecutionError> {
    Quantity::parse(s.inner()).map(QuantityVal).map_err(|e| fn_err("quantity", e))
}
fn is_quantity(s: &CelString<'_>) -> CelBool {
    CelBool::from(Quantity::parse(s.inner()).is_ok())
}
fn q_less(a: &QuantityVal, b: &QuantityVal) -> CelBool {
    CelBool::from(a.0 < b.0)
}
fn q_greater(a: &QuantityVal, b: &QuantityVal) -> CelBool {
    CelBool::from(a.0 > b.0)
}
fn q_compare(a: &QuantityVal, b: &QuantityVal) -> CelInt {
    CelInt::from(a.0.cmp(&b.0) as i64)
}
fn q_add(a: &QuantityVal, b: &QuantityVal) -> QuantityVal {
    QuantityVal(a.0.saturating_add(b.0))
}
fn q_add_int(a: &QuantityVal, b: &CelInt) -> QuantityVal {
    QuantityVal(a.0.saturating_add(Quantity::from_units(*b.inner())))
}
fn q_sub(a: &QuantityVal, b: &QuantityVal) -> QuantityVal {
    QuantityVal(a.0.saturating_sub(b.0))
}
fn q_sub_int(a: &QuantityVal, b: &CelInt) -> QuantityVal {
    QuantityVal(a.0.saturating_sub(Quantity::from_units(*b.inner())))
}
fn q_is_integer(a: &QuantityVal) -> CelBool {
    CelBool::from(a.0.0 % 1_000_000_000 == 0 && i64::try_from(a.0.0 / 1_000_000_000).is_ok())
}
fn q_as_integer(a: &QuantityVal) -> std::result::Result<CelInt, ExecutionError> {
    if a.0.0 % 1_000_000_000 != 0 {
        return Err(fn_err("asInteger", "cannot convert value to integer: not an integer"));
    }
    i64::try_from(a.0.0 / 1_000_000_000)
        .map(CelInt::from)
        .map_err(|_| fn_err("asInteger", "cannot convert value to integer: overflow"))
}
fn q_as_float(a: &QuantityVal) -> CelDouble {
    #[allow(clippy::cast_precision_loss)] // approximate by definition
    CelDouble::from(a.0.0 as f64 / 1e9)
}
fn q_sign(a: &QuantityVal) -> CelInt {
    CelInt::from(a.0.0.signum() as i64)
}

fn dra_env() -> std::result::Result<Env, cel::DeclarationError> {
    let mut env = Env::stdlib();
    env.add_extension(cel::extensions::strings)?;
    cel::add_overload!(env, fn semver: (CelString) -> Result<SemverVal>)?;
    cel::add_overload!(env, fn semver_normalize: (CelString, CelBool) -> Result<SemverVal>, name = "semver")?;
    cel::add_overload!(env, fn is_semver: (CelString) -> CelBool)?;
    cel::add_member_overload!(env, fn semver_major: (SemverVal) -> CelInt, name = "major")?;
    cel::add_member_overload!(env, fn semver_minor: (SemverVal) -> CelInt, name = "minor")?;
    cel::add_member_overload!(env, fn semver_patch: (SemverVal) -> CelInt, name = "patch")?;
    cel::add_member_overload!(env, fn semver_less: (SemverVal, SemverVal) -> CelBool, name = "isLessThan")?;
    cel::add_member_overload!(env, fn semver_greater: (SemverVal, SemverVal) -> CelBool, name = "isGreaterThan")?;
    cel::add_member_overload!(env, fn semver_compare: (SemverVal, SemverVal) -> CelInt, name = "compareTo")?;
    cel::add_overload!(env, fn quantity: (CelString) -> Result<QuantityVal>)?;
    cel::add_overload!(env, fn is_quantity: (CelString) -> CelBool)?;
    cel::add_member_overload!(env, fn q_less: (QuantityVal, QuantityVal) -> CelBool, name = "isLessThan")?;
    cel::add_member_overload!(env, fn q_greater: (QuantityVal, QuantityVal) -> CelBool, name = "isGreaterThan")?;
    cel::add_member_overload!(env, fn q_compare: (QuantityVal, QuantityVal) -> CelInt, name = "compareTo")?;
    cel::add_member_overload!(env, fn q_add: (QuantityVal, QuantityVal) -> QuantityVal, name = "add")?;
    cel::add_member_overload!(env, fn q_add_int: (QuantityVal, CelInt) -> QuantityVal, name = "add")?;
    cel::add_member_overload!(env, fn q_sub: (QuantityVal, QuantityVal) -> QuantityVal, name = "sub")?;
    cel::add_member_overload!(env, fn q_sub_int: (QuantityVal, CelInt) -> QuantityVal, name = "sub")?;
    cel::add_member_overload!(env, fn q_is_integer: (QuantityVal) -> CelBool, name = "isInteger")?;
    cel::add_member_overload!(env, fn q_as_integer: (QuantityVal) -> Result<CelInt>, name = "asInteger")?;
    cel::add_member_overload!(env, fn q_as_float: (QuantityVal) -> CelDouble, name = "asApproximateFloat")?;
    cel::add_member_overload!(env, fn q_sign: (QuantityVal) -> CelInt, name = "sign")?;
    Ok(env)
}

// ---- static cost bound ----

fn longest_literal(e: &IdedExpr) -> u64 {
    let mut max = 0u64;
    walk(e, &mut |x| {
        if let Expr::Literal(l) = &x.expr {
            let s = format!("{l:?}");
            max = max.max(u64::try_from(s.len()).unwrap_or(u64::MAX));
        }
    });
    max
}

fn walk(e: &IdedExpr, f: &mut dyn FnMut(&IdedExpr)) {
    f(e);
    match &e.expr {
        Expr::Call(c) => {
            if let Some(t) = &c.target {
                walk(t, f);
            }
            for a in &c.args {
                walk(a, f);
            }
        }
        Expr::Comprehension(c) => {
            for x in [&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result] {
                walk(x, f);
            }
        }
        Expr::List(l) => l.elements.iter().for_each(|x| walk(x, f)),
        Expr::Map(m) => {
            for en in &m.entries {
                if let cel::common::ast::EntryExpr::MapEntry(me) = &en.expr {
                    walk(&me.key, f);
                    walk(&me.value, f);
                }
            }
        }
        Expr::Select(s) => walk(&s.operand, f),
        Expr::Struct(s) => {
            for en in &s.entries {
                if let cel::common::ast::EntryExpr::StructField(sf) = &en.expr {
                    walk(&sf.value, f);
                }
            }
        }
        _ => {}
    }
}

/// Worst-case cost of an expression; `range` bounds a non-literal range.
fn cost(e: &IdedExpr, range: u64) -> u64 {
    match &e.expr {
        Expr::Call(c) => {
            let mut sum = 1u64;
            if let Some(t) = &c.target {
                sum = sum.saturating_add(cost(t, range));
            }
            for a in &c.args {
                sum = sum.saturating_add(cost(a, range));
            }
            // string functions are linear in their inputs
            sum.saturating_add(range)
        }
        Expr::Comprehension(c) => {
            let n = match &c.iter_range.expr {
                Expr::List(l) => u64::try_from(l.elements.len()).unwrap_or(u64::MAX),
                _ => range,
            };
            let body = cost(&c.loop_cond, range).saturating_add(cost(&c.loop_step, range));
            cost(&c.iter_range, range)
                .saturating_add(cost(&c.accu_init, range))
                .saturating_add(n.saturating_mul(body))
                .saturating_add(cost(&c.result, range))
        }
        Expr::List(l) => l.elements.iter().fold(1u64, |s, x| s.saturating_add(cost(x, range))),
        Expr::Map(_) | Expr::Struct(_) => {
            let mut s = 1u64;
            walk(e, &mut |_| s = s.saturating_add(1));
            s
        }
        Expr::Select(s) => cost(&s.operand, range).saturating_add(1),
        _ => 1,
    }
}

/// A compiled selector expression.
#[derive(Debug)]
pub struct Compiled {
    /// The expression text.
    pub expression: String,
    /// Unique in the process: keys memoized results ([`crate::inventory::SelectorMemo`]).
    id: u64,
    program: std::result::Result<Program, String>,
    /// The static worst-case cost bound.
    pub max_cost: u64,
}

/// The next [`Compiled::id`].
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Compiled {
    /// Unique in the process (two compilations of the same text differ):
    /// what selector results are memoized under.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The compile error, if the expression does not compile.
    pub fn error(&self) -> Option<&str> {
        self.program.as_ref().err().map(String::as_str)
    }

    /// Evaluates the expression for a device: `Ok(true)` when it selects it.
    pub fn matches(&self, env: &Arc<Env>, device: &DeviceVal) -> Result<bool> {
        let program = self.program.as_ref().map_err(|e| CelError::Compile(e.clone()))?;
        if self.max_cost > MAX_COST {
            return Err(CelError::Runtime("operation cancelled: actual cost limit exceeded".into()));
        }
        let mut ctx = Context::with_env(env.clone());
        ctx.add_variable_as_val("device", Box::new(device.clone()));
        match program.execute(&ctx) {
            Ok(Value::Bool(b)) => Ok(b),
            Ok(other) => Err(CelError::Runtime(format!(
                "CEL result of type {} could not be converted to bool",
                other.type_of()
            ))),
            Err(e) => {
                let msg = e.to_string();
                if matches!(e, ExecutionError::NoSuchKey(_)) {
                    Err(CelError::Runtime(format!(
                        "no such key: {}. consider using CEL optional chaining (.? followed by orValue()) or guarding the check with has() for optional fields",
                        msg.trim_start_matches("No such key: ")
                    )))
                } else {
                    Err(CelError::Runtime(msg))
                }
            }
        }
    }
}

/// The compiled expressions, keyed by expression text; shared by all
/// allocation attempts (thread-safe).
pub struct CelCache {
    env: Arc<Env>,
    compiled: Mutex<HashMap<String, Arc<Compiled>>>,
}

impl std::fmt::Debug for CelCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CelCache").field("expressions", &self.len()).finish()
    }
}

impl Default for CelCache {
    fn default() -> Self {
        Self::new()
    }
}

impl CelCache {
    /// A cache with Kubernetes' DRA environment.
    pub fn new() -> Self {
        // The declarations are static and known to be distinct; should one ever
        // conflict, the stdlib alone is still a working environment.
        let env = dra_env().unwrap_or_else(|_| Env::stdlib());
        CelCache { env: Arc::new(env), compiled: Mutex::new(HashMap::new()) }
    }

    /// The environment, for [`Compiled::matches`].
    pub fn env(&self) -> &Arc<Env> {
        &self.env
    }

    /// How many expressions are cached.
    pub fn len(&self) -> usize {
        self.compiled.lock().map_or(0, |m| m.len())
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The compiled form of an expression, compiling it on first use.
    pub fn get_or_compile(&self, expression: &str) -> Arc<Compiled> {
        if let Ok(m) = self.compiled.lock()
            && let Some(c) = m.get(expression)
        {
            return c.clone();
        }
        let program = self.env.compile(expression).map_err(|e| e.to_string());
        let max_cost = match &program {
            Ok(p) => {
                let e = p.expression();
                let range = longest_literal(e).max(64);
                cost(e, range)
            }
            Err(_) => u64::MAX,
        };
        let c = Arc::new(Compiled {
            expression: expression.to_string(),
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            program,
            max_cost,
        });
        if let Ok(mut m) = self.compiled.lock() {
            m.entry(expression.to_string()).or_insert_with(|| c.clone());
        }
        c
    }

    /// Compiles and evaluates in one step (tests, tools).
    pub fn eval(&self, expression: &str, device: &DeviceVal) -> Result<bool> {
        self.get_or_compile(expression).matches(&self.env, device)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu() -> DeviceVal {
        let r = DeviceVal::new(
            "gpu.example.com",
            false,
            [
                ("model", AttrIn::Str("a100")),
                ("cores", AttrIn::Int(108)),
                ("gpu.example.com/driverVersion", AttrIn::Version("1.2.3")),
                ("other.org/healthy", AttrIn::Bool(true)),
            ],
            [("memory", Quantity::parse("40Gi").unwrap_or_default())],
        );
        match r {
            Ok(d) => d,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn device_environment() {
        let c = CelCache::new();
        let d = gpu();
        let ok = |e: &str| c.eval(e, &d);
        assert_eq!(ok(r#"device.driver == "gpu.example.com""#), Ok(true));
        assert_eq!(ok(r#"device.attributes["gpu.example.com"].model == "a100""#), Ok(true));
        assert_eq!(ok(r#"device.attributes["gpu.example.com"].cores > 100"#), Ok(true));
        assert_eq!(ok(r#"device.attributes["other.org"].healthy"#), Ok(true));
        assert_eq!(ok(r#"device.allowMultipleAllocations"#), Ok(false));
        assert_eq!(ok(r#"has(device.attributes["gpu.example.com"].missing)"#), Ok(false));
        assert_eq!(ok(r#"has(device.attributes["nowhere"].missing)"#), Ok(false));
        assert_eq!(ok(r#""nowhere" in device.attributes"#), Ok(false));
        assert_eq!(ok(r#"device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("1.0.0"))"#), Ok(true));
        assert_eq!(ok(r#"device.attributes["gpu.example.com"].driverVersion.compareTo(semver("1.2.3")) == 0"#), Ok(true));
        assert_eq!(ok(r#"device.attributes["gpu.example.com"].driverVersion == semver("1.2.3")"#), Ok(true));
        assert_eq!(ok(r#"semver("v1.2", true).isLessThan(semver("1.2.1"))"#), Ok(true));
        assert_eq!(ok(r#"device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) == 0"#), Ok(true));
        assert_eq!(ok(r#"device.capacity["gpu.example.com"].memory.isGreaterThan(quantity("10Gi"))"#), Ok(true));
        assert_eq!(ok(r#"quantity("2").asInteger() == 2"#), Ok(true));
        assert_eq!(ok(r#"device.attributes["gpu.example.com"].model.startsWith("a1")"#), Ok(true));
        assert_eq!(ok(r#"device.attributes["gpu.example.com"].exists(k, k == "cores")"#), Ok(true));
    }

    #[test]
    fn runtime_and_compile_errors() {
        let c = CelCache::new();
        let d = gpu();
        match c.eval(r#"device.attributes["gpu.example.com"].nope == "x""#, &d) {
            Err(CelError::Runtime(m)) => assert!(m.starts_with("no such key: nope"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(c.eval("device.driver ==", &d), Err(CelError::Compile(_))));
        assert!(matches!(c.eval("device.driver", &d), Err(CelError::Runtime(_))));
        assert!(c.get_or_compile("device.driver ==").error().is_some());
    }

    #[test]
    fn compiled_once_and_cost_bounded() {
        let c = CelCache::new();
        let a = c.get_or_compile("true");
        let b = c.get_or_compile("true");
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(c.len(), 1);
        let nested = r#"device.attributes["a"].all(x, device.attributes["a"].all(y, device.attributes["a"].all(z, device.attributes["a"].all(w, true))))"#;
        let r = c.eval(nested, &gpu());
        assert!(matches!(r, Err(CelError::Runtime(ref m)) if m.contains("cost limit")), "{r:?}");
    }
}
