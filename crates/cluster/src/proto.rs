//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`) for the
//! built-in kinds, decoded into the JSON the cluster stores for a JSON body.
//!
//! kubectl's typed commands (`kubectl create namespace|configmap|secret|
//! deployment|token|...`) send protobuf and do not fall back to JSON, so the
//! local cluster reads it: the API server's envelope (the magic `k8s\0`, then
//! a `runtime.Unknown` with `typeMeta {apiVersion, kind}`, `raw`,
//! `contentEncoding`, `contentType`), and the object in `raw`, decoded by a
//! table-driven wire reader. Responses stay JSON: clients that send protobuf
//! accept `application/vnd.kubernetes.protobuf,application/json`.
//!
//! The schema table (`proto_schema.json`, loaded at first use) is generated
//! by `tools/gen_proto_schema.py` (it says how to rerun it): every message of
//! kube-rs's prost-generated `k8s-pb` crate with its field numbers, scalar
//! and message types, repeated and map fields; and, per field, the JSON name
//! and the Go shape of the published API types (k8s.io/api and
//! k8s.io/apimachinery struct tags, matched by field number, JSON names
//! checked against k8s-openapi's).
//!
//! Well-known types: `Time` (seconds) and `MicroTime` become RFC 3339 as
//! k8s-openapi writes them, and the zero time (an empty message, which is
//! how Go writes it) is absent; `Duration` becomes Go's duration string;
//! `Quantity` its string; `IntOrString` a number or a string;
//! `RawExtension`, apiextensions `JSON` and `FieldsV1` their raw JSON bytes
//! parsed; `bytes` base64; int32/int64 varints sign-extended as Go reads them.
//!
//! Zero values, the rule: the JSON is what Go's `encoding/json` writes for
//! the struct Go's protobuf decoder fills, so it matches what kubectl would
//! have sent as JSON. Go's protobuf marshaller writes every non-pointer
//! field, zero or not, and a pointer field only when it is set. So a field
//! absent on the wire is absent in JSON; a present scalar is dropped only
//! when it is zero ("", 0, false) *and* its Go field is a non-pointer with
//! `omitempty` (no `metadata.namespace: ""`, no `schedulerName: ""` that
//! would escape defaulting), and kept when its Go field is a pointer (so
//! `replicas: 0`, `storageClassName: ""`, `automountServiceAccountToken:
//! false`, `runAsUser: 0`, `backoffLimit: 0` survive) or has no
//! `omitempty`. Non-pointer structs are written even when empty (`spec: {}`,
//! `status: {}`, as Go's JSON does) unless tagged `omitzero`; embedded
//! structs (`VolumeSource` in `Volume`, `ProbeHandler` in `Probe`) are
//! inlined into their parent. Empty lists and maps are absent (the wire
//! cannot tell them from unset). Fields the table lacks Go tags for (a
//! handful: apiextensions, removed versions) drop zeros. Unknown field
//! numbers are skipped, as Go's decoder does.
//!
//! The body is untrusted: truncated or malformed input is an [`Error`]
//! naming the field path and the fault (the API answers 400), never a
//! panic; nesting is bounded. A kind with no protobuf schema (a custom
//! resource) is [`Error::NoSchema`] (415, as the API server answers).

use std::collections::HashMap;
use std::sync::OnceLock;

use base64::Engine as _;
use serde_json::{Map, Value};

/// The protobuf envelope's magic prefix.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// The protobuf media type.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// Nesting bound (messages within messages) for untrusted bodies.
const MAX_DEPTH: usize = 100;

/// Why a protobuf body cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The body does not start with `k8s\0`.
    #[error("the protobuf body does not start with the magic prefix \"k8s\\x00\"")]
    Magic,
    /// The wire data is malformed at `at`.
    #[error("malformed protobuf at {at}: {what}")]
    Malformed {
        /// The field path (`Unknown.raw`, `Deployment.spec.replicas`, ...).
        at: String,
        /// What is wrong.
        what: String,
    },
    /// The envelope names no kind.
    #[error("the protobuf envelope has no typeMeta.{0}")]
    MissingTypeMeta(&'static str),
    /// The envelope's raw bytes are compressed or otherwise encoded.
    #[error("unsupported protobuf contentEncoding {0:?}")]
    ContentEncoding(String),
    /// No protobuf schema for this kind (custom resources have none).
    #[error("no protobuf schema for kind {kind:?} in {api_version:?}: send application/json")]
    NoSchema {
        /// The envelope's apiVersion.
        api_version: String,
        /// The envelope's kind.
        kind: String,
    },
    /// The embedded schema table could not be read (a build defect).
    #[error("protobuf schema table: {0}")]
    Table(String),
}

impl Error {
    /// Whether the API answers 415 (a kind it cannot read as protobuf)
    /// rather than 400 (a malformed body).
    pub fn unsupported_media_type(&self) -> bool {
        matches!(self, Error::NoSchema { .. })
    }
}

fn malformed(at: &str, what: impl Into<String>) -> Error {
    Error::Malformed { at: at.to_string(), what: what.into() }
}

/// Scalar and message types of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    String,
    Int32,
    Int64,
    Uint32,
    Uint64,
    Bool,
    Bytes,
    Double,
    Float,
    Message,
}

impl Ty {
    fn parse(s: &str) -> Option<Ty> {
        Some(match s {
            "string" => Ty::String,
            "int32" => Ty::Int32,
            "int64" => Ty::Int64,
            "uint32" => Ty::Uint32,
            "uint64" => Ty::Uint64,
            "bool" => Ty::Bool,
            "bytes" => Ty::Bytes,
            "double" => Ty::Double,
            "float" => Ty::Float,
            "message" => Ty::Message,
            _ => return None,
        })
    }

    fn wire(self) -> u8 {
        match self {
            Ty::String | Ty::Bytes | Ty::Message => 2,
            Ty::Double => 1,
            Ty::Float => 5,
            Ty::Int32 | Ty::Int64 | Ty::Uint32 | Ty::Uint64 | Ty::Bool => 0,
        }
    }
}

#[derive(Debug)]
struct Field {
    json: String,
    ty: Ty,
    /// For a map: the value type (`ty` is the key type).
    map_value: Option<Ty>,
    /// The message type (of the field, or of the map's values).
    msg: String,
    repeated: bool,
    pointer: bool,
    omitempty: bool,
    omitzero: bool,
    inline: bool,
}

type Message = HashMap<u32, Field>;

struct Table {
    messages: HashMap<String, Message>,
    /// Lower-cased name -> name: prost renames some acronyms (`IPBlock` is
    /// `IpBlock`, `JSON` is `Json`) and keeps others (`CSINode`), while the
    /// envelope carries Go's kind.
    lower: HashMap<String, String>,
}

/// A field as the generator writes it: `[tag, json, type, ref, flags]`.
type RawField = (u32, String, String, String, String);

#[derive(serde::Deserialize)]
struct RawTable {
    messages: HashMap<String, Vec<RawField>>,
}

impl Table {
    fn parse(text: &str) -> Result<Table, String> {
        let raw: RawTable = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let mut messages = HashMap::with_capacity(raw.messages.len());
        for (name, rows) in raw.messages {
            let mut fields = HashMap::with_capacity(rows.len());
            for (tag, json, ty, msg, flags) in rows {
                let bad = || format!("{name} field {tag}: type {ty:?}");
                let (ty, map_value) = match ty.strip_prefix("map:") {
                    Some(kv) => {
                        let (k, v) = kv.split_once(':').ok_or_else(bad)?;
                        (Ty::parse(k).ok_or_else(bad)?, Some(Ty::parse(v).ok_or_else(bad)?))
                    }
                    None => (Ty::parse(&ty).ok_or_else(bad)?, None),
                };
                let f = Field {
                    json,
                    ty,
                    map_value,
                    msg,
                    repeated: flags.contains('r'),
                    pointer: flags.contains('p'),
                    omitempty: flags.contains('o'),
                    omitzero: flags.contains('z'),
                    inline: flags.contains('i'),
                };
                fields.insert(tag, f);
            }
            messages.insert(name, fields);
        }
        let lower = messages.keys().map(|k| (k.to_ascii_lowercase(), k.clone())).collect();
        Ok(Table { messages, lower })
    }
}

fn table() -> Result<&'static Table, Error> {
    static TABLE: OnceLock<Result<Table, String>> = OnceLock::new();
    TABLE.get_or_init(|| Table::parse(include_str!("proto_schema.json"))).as_ref().map_err(|e| Error::Table(e.clone()))
}

/// Whether a request's Content-Type is the protobuf media type.
pub fn is_protobuf(content_type: &str) -> bool {
    content_type.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case(MEDIA_TYPE)
}

/// Decode a protobuf request body (envelope included) into the object's
/// JSON, `apiVersion` and `kind` first.
pub fn decode(body: &[u8]) -> Result<Value, Error> {
    let rest = body.strip_prefix(MAGIC.as_slice()).ok_or(Error::Magic)?;
    let env = Envelope::read(rest)?;
    if !env.content_encoding.is_empty() {
        return Err(Error::ContentEncoding(env.content_encoding));
    }
    if env.kind.is_empty() {
        return Err(Error::MissingTypeMeta("kind"));
    }
    if env.api_version.is_empty() {
        return Err(Error::MissingTypeMeta("apiVersion"));
    }
    let t = table()?;
    let name = message_name(t, &env.api_version, &env.kind)
        .ok_or_else(|| Error::NoSchema { api_version: env.api_version.clone(), kind: env.kind.clone() })?;
    let mut obj = Map::new();
    obj.insert("apiVersion".into(), Value::String(env.api_version));
    obj.insert("kind".into(), Value::String(env.kind.clone()));
    let d = Decoder { t };
    if let Some(Value::Object(fields)) = d.message(name, env.raw, &env.kind, 0)? {
        obj.extend(fields);
    }
    Ok(Value::Object(obj))
}

/// The table's message for a group version and kind: the group's package
/// in k8s-pb's layout, else meta/v1 (DeleteOptions and the other options
/// kinds are registered in every group version).
fn message_name<'t>(t: &'t Table, api_version: &str, kind: &str) -> Option<&'t str> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let module = match group {
        "" => "api.core".to_string(),
        "apiextensions.k8s.io" => "apiextensions_apiserver.pkg.apis.apiextensions".to_string(),
        "internal.apiserver.k8s.io" => "api.apiserverinternal".to_string(),
        "meta.k8s.io" => "apimachinery.pkg.apis.meta".to_string(),
        g => format!("api.{}", g.split('.').next().unwrap_or(g)),
    };
    [format!("{module}.{version}.{kind}"), format!("apimachinery.pkg.apis.meta.v1.{kind}")]
        .into_iter()
        .find_map(|n| t.lower.get(&n.to_ascii_lowercase()).map(String::as_str))
}

/// `runtime.Unknown`, the envelope.
struct Envelope<'a> {
    api_version: String,
    kind: String,
    raw: &'a [u8],
    content_encoding: String,
}

impl<'a> Envelope<'a> {
    fn read(buf: &'a [u8]) -> Result<Envelope<'a>, Error> {
        let mut env = Envelope { api_version: String::new(), kind: String::new(), raw: &[], content_encoding: String::new() };
        let mut r = Reader::new(buf);
        while let Some((tag, wire)) = r.key("Unknown")? {
            match (tag, wire) {
                (1, 2) => {
                    let mut tm = Reader::new(r.bytes("Unknown.typeMeta")?);
                    while let Some((tag, wire)) = tm.key("Unknown.typeMeta")? {
                        match (tag, wire) {
                            (1, 2) => env.api_version = utf8(tm.bytes("Unknown.typeMeta.apiVersion")?, "Unknown.typeMeta.apiVersion")?,
                            (2, 2) => env.kind = utf8(tm.bytes("Unknown.typeMeta.kind")?, "Unknown.typeMeta.kind")?,
                            _ => tm.skip(wire, "Unknown.typeMeta")?,
                        }
                    }
                }
                (2, 2) => env.raw = r.bytes("Unknown.raw")?,
                (3, 2) => env.content_encoding = utf8(r.bytes("Unknown.contentEncoding")?, "Unknown.contentEncoding")?,
                _ => r.skip(wire, "Unknown")?,
            }
        }
        Ok(env)
    }
}

fn utf8(b: &[u8], at: &str) -> Result<String, Error> {
    String::from_utf8(b.to_vec()).map_err(|_| malformed(at, "invalid UTF-8 in a string"))
}

/// A bounds-checked protobuf wire reader (varints, fixed32/64,
/// length-delimited); hand-written as it is a few lines and keeps `prost`
/// out of the build.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn varint(&mut self, at: &str) -> Result<u64, Error> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let b = *self.buf.get(self.pos).ok_or_else(|| malformed(at, "unexpected end of data in a varint"))?;
            self.pos += 1;
            if i == 9 && b > 1 {
                return Err(malformed(at, "varint overflows 64 bits"));
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(malformed(at, "varint longer than 10 bytes"))
    }

    fn fixed<const N: usize>(&mut self, at: &str) -> Result<[u8; N], Error> {
        let end = self.pos.checked_add(N).filter(|e| *e <= self.buf.len()).ok_or_else(|| malformed(at, "unexpected end of data in a fixed-size value"))?;
        let mut out = [0u8; N];
        out.copy_from_slice(&self.buf[self.pos..end]);
        self.pos = end;
        Ok(out)
    }

    fn bytes(&mut self, at: &str) -> Result<&'a [u8], Error> {
        let len = self.varint(at)?;
        let len = usize::try_from(len).map_err(|_| malformed(at, "length overflows"))?;
        let end = self
            .pos
            .checked_add(len)
            .filter(|e| *e <= self.buf.len())
            .ok_or_else(|| malformed(at, format!("length {len} runs past the end of the data")))?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    /// The next field's number and wire type, or None at the end.
    fn key(&mut self, at: &str) -> Result<Option<(u32, u8)>, Error> {
        if self.done() {
            return Ok(None);
        }
        let k = self.varint(at)?;
        let tag = u32::try_from(k >> 3).map_err(|_| malformed(at, "field number overflows"))?;
        if tag == 0 {
            return Err(malformed(at, "field number 0"));
        }
        Ok(Some((tag, (k & 7) as u8)))
    }

    fn skip(&mut self, wire: u8, at: &str) -> Result<(), Error> {
        match wire {
            0 => self.varint(at).map(drop),
            1 => self.fixed::<8>(at).map(drop),
            2 => self.bytes(at).map(drop),
            5 => self.fixed::<4>(at).map(drop),
            w => Err(malformed(at, format!("unsupported wire type {w}"))),
        }
    }
}

struct Decoder<'t> {
    t: &'t Table,
}

const TIME: &str = "apimachinery.pkg.apis.meta.v1.Time";
const MICRO_TIME: &str = "apimachinery.pkg.apis.meta.v1.MicroTime";
const DURATION: &str = "apimachinery.pkg.apis.meta.v1.Duration";
const FIELDS_V1: &str = "apimachinery.pkg.apis.meta.v1.FieldsV1";
const QUANTITY: &str = "apimachinery.pkg.api.resource.Quantity";
const INT_OR_STRING: &str = "apimachinery.pkg.util.intstr.IntOrString";
const RAW_EXTENSION: &str = "apimachinery.pkg.runtime.RawExtension";

impl Decoder<'_> {
    /// A message's JSON; None for a value Go writes as absent (the zero time).
    fn message(&self, name: &str, buf: &[u8], at: &str, depth: usize) -> Result<Option<Value>, Error> {
        if depth > MAX_DEPTH {
            return Err(malformed(at, format!("nested deeper than {MAX_DEPTH} messages")));
        }
        match name {
            TIME | MICRO_TIME => return self.time(name == MICRO_TIME, buf, at),
            DURATION => return Ok(Some(Value::String(go_duration(self.int_field(buf, 1, at)?)))),
            QUANTITY => return Ok(Some(Value::String(self.string_field(buf, 1, at)?))),
            INT_OR_STRING => return self.int_or_string(buf, at).map(Some),
            RAW_EXTENSION | FIELDS_V1 => return raw_json(self.bytes_field(buf, 1, at)?, at),
            n if n.starts_with("apiextensions_apiserver.") && n.ends_with(".Json") => {
                return raw_json(self.bytes_field(buf, 1, at)?, at);
            }
            _ => {}
        }
        let fields = self.t.messages.get(name).ok_or_else(|| malformed(at, format!("no schema for message {name}")))?;
        let mut obj = Map::new();
        let mut r = Reader::new(buf);
        while let Some((tag, wire)) = r.key(at)? {
            let Some(f) = fields.get(&tag) else {
                r.skip(wire, at)?;
                continue;
            };
            let here = if f.inline { at.to_string() } else { format!("{at}.{}", f.json) };
            if let Some(vt) = f.map_value {
                if wire != 2 {
                    return Err(malformed(&here, format!("wire type {wire} for a map entry")));
                }
                let (k, v) = self.map_entry(f, vt, r.bytes(&here)?, &here, depth)?;
                if let Value::Object(m) = obj.entry(f.json.clone()).or_insert_with(|| Value::Object(Map::new())) {
                    m.insert(k, v);
                }
                continue;
            }
            if f.repeated && wire == 2 && f.ty.wire() != 2 {
                // A packed run of scalars.
                let mut p = Reader::new(r.bytes(&here)?);
                while !p.done() {
                    let v = self.scalar(f.ty, &mut p, &here)?;
                    push(&mut obj, &f.json, v);
                }
                continue;
            }
            if wire != f.ty.wire() {
                return Err(malformed(&here, format!("wire type {wire}, expected {} for a {:?}", f.ty.wire(), f.ty)));
            }
            let v = if f.ty == Ty::Message {
                let b = r.bytes(&here)?;
                self.message(&f.msg, b, &here, depth + 1)?
            } else {
                Some(self.scalar(f.ty, &mut r, &here)?)
            };
            if f.repeated {
                push(&mut obj, &f.json, v.unwrap_or(Value::Null));
                continue;
            }
            match v {
                None => {
                    obj.remove(&f.json);
                }
                Some(Value::Object(m)) if f.inline => obj.extend(m),
                Some(Value::Object(m)) if m.is_empty() && f.omitzero && !f.pointer => {
                    obj.remove(&f.json);
                }
                Some(v) if !f.pointer && f.omitempty && is_zero(&v) => {
                    obj.remove(&f.json);
                }
                Some(v) => {
                    obj.insert(f.json.clone(), v);
                }
            }
        }
        Ok(Some(Value::Object(obj)))
    }

    fn scalar(&self, ty: Ty, r: &mut Reader<'_>, at: &str) -> Result<Value, Error> {
        Ok(match ty {
            // Go reads an int32 varint as the low 32 bits of a sign-extended 64-bit value.
            Ty::Int32 => Value::from(r.varint(at)? as i64 as i32),
            Ty::Int64 => Value::from(r.varint(at)? as i64),
            Ty::Uint32 => Value::from(r.varint(at)? as u32),
            Ty::Uint64 => Value::from(r.varint(at)?),
            Ty::Bool => Value::Bool(r.varint(at)? != 0),
            Ty::Double => float(f64::from_le_bytes(r.fixed::<8>(at)?), at)?,
            Ty::Float => float(f64::from(f32::from_le_bytes(r.fixed::<4>(at)?)), at)?,
            Ty::String => Value::String(utf8(r.bytes(at)?, at)?),
            Ty::Bytes => Value::String(base64::engine::general_purpose::STANDARD.encode(r.bytes(at)?)),
            Ty::Message => return Err(malformed(at, "a message where a scalar was expected")),
        })
    }

    fn map_entry(&self, f: &Field, vt: Ty, buf: &[u8], at: &str, depth: usize) -> Result<(String, Value), Error> {
        let mut key = None;
        let mut value = None;
        let mut r = Reader::new(buf);
        while let Some((tag, wire)) = r.key(at)? {
            match tag {
                1 if wire == f.ty.wire() && f.ty != Ty::Message => {
                    key = Some(match self.scalar(f.ty, &mut r, at)? {
                        Value::String(s) => s,
                        other => other.to_string(),
                    });
                }
                2 if wire == vt.wire() && vt == Ty::Message => {
                    let b = r.bytes(at)?;
                    value = self.message(&f.msg, b, at, depth + 1)?;
                }
                2 if wire == vt.wire() => value = Some(self.scalar(vt, &mut r, at)?),
                1 | 2 => return Err(malformed(at, format!("wire type {wire} in a map entry's field {tag}"))),
                _ => r.skip(wire, at)?,
            }
        }
        // Go fills a missing key or value with its zero value.
        let value = match value {
            Some(v) => v,
            None => match vt {
                Ty::Message => Value::Object(Map::new()),
                Ty::String | Ty::Bytes => Value::String(String::new()),
                Ty::Bool => Value::Bool(false),
                _ => Value::from(0),
            },
        };
        Ok((key.unwrap_or_default(), value))
    }

    fn time(&self, micro: bool, buf: &[u8], at: &str) -> Result<Option<Value>, Error> {
        if buf.is_empty() {
            return Ok(None);
        }
        let (mut secs, mut nanos) = (0i64, 0i32);
        let mut r = Reader::new(buf);
        while let Some((tag, wire)) = r.key(at)? {
            match (tag, wire) {
                (1, 0) => secs = r.varint(at)? as i64,
                (2, 0) => nanos = r.varint(at)? as i64 as i32,
                _ => r.skip(wire, at)?,
            }
        }
        let bad = |e: k8s_openapi::jiff::Error| malformed(at, format!("time out of range: {e}"));
        let ts = if micro {
            // MicroTime keeps microseconds.
            k8s_openapi::jiff::Timestamp::new(secs, nanos - nanos.rem_euclid(1000)).map_err(bad)?
        } else {
            k8s_openapi::jiff::Timestamp::from_second(secs).map_err(bad)?
        };
        let v = if micro {
            serde_json::to_value(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(ts))
        } else {
            serde_json::to_value(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(ts))
        };
        v.map(Some).map_err(|e| malformed(at, e.to_string()))
    }

    fn int_or_string(&self, buf: &[u8], at: &str) -> Result<Value, Error> {
        let (mut kind, mut int_val, mut str_val) = (0i64, 0i32, String::new());
        let mut r = Reader::new(buf);
        while let Some((tag, wire)) = r.key(at)? {
            match (tag, wire) {
                (1, 0) => kind = r.varint(at)? as i64,
                (2, 0) => int_val = r.varint(at)? as i64 as i32,
                (3, 2) => str_val = utf8(r.bytes(at)?, at)?,
                _ => r.skip(wire, at)?,
            }
        }
        Ok(if kind == 1 { Value::String(str_val) } else { Value::from(int_val) })
    }

    fn int_field(&self, buf: &[u8], want: u32, at: &str) -> Result<i64, Error> {
        let mut out = 0;
        let mut r = Reader::new(buf);
        while let Some((tag, wire)) = r.key(at)? {
            if tag == want && wire == 0 {
                out = r.varint(at)? as i64;
            } else {
                r.skip(wire, at)?;
            }
        }
        Ok(out)
    }

    fn bytes_field<'b>(&self, buf: &'b [u8], want: u32, at: &str) -> Result<&'b [u8], Error> {
        let mut out: &[u8] = &[];
        let mut r = Reader::new(buf);
        while let Some((tag, wire)) = r.key(at)? {
            if tag == want && wire == 2 {
                out = r.bytes(at)?;
            } else {
                r.skip(wire, at)?;
            }
        }
        Ok(out)
    }

    fn string_field(&self, buf: &[u8], want: u32, at: &str) -> Result<String, Error> {
        utf8(self.bytes_field(buf, want, at)?, at)
    }
}

fn push(obj: &mut Map<String, Value>, key: &str, v: Value) {
    match obj.entry(key.to_string()).or_insert_with(|| Value::Array(Vec::new())) {
        Value::Array(a) => a.push(v),
        other => *other = Value::Array(vec![v]),
    }
}

fn float(f: f64, at: &str) -> Result<Value, Error> {
    serde_json::Number::from_f64(f).map(Value::Number).ok_or_else(|| malformed(at, "a NaN or infinite number"))
}

/// Raw JSON bytes (RawExtension, JSON, FieldsV1); absent when empty.
fn raw_json(b: &[u8], at: &str) -> Result<Option<Value>, Error> {
    if b.is_empty() {
        return Ok(None);
    }
    serde_json::from_slice(b).map(Some).map_err(|e| malformed(at, format!("raw bytes are not JSON: {e}")))
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Null => true,
        Value::Array(_) | Value::Object(_) => false,
    }
}

/// Go's `time.Duration.String()`: "1h2m3.5s", "1.5ms", "0s".
fn go_duration(ns: i64) -> String {
    if ns == 0 {
        return "0s".into();
    }
    let neg = ns < 0;
    let u = ns.unsigned_abs();
    let frac = |v: u64, unit: u64| {
        let whole = v / unit;
        let rest = v % unit;
        if rest == 0 {
            whole.to_string()
        } else {
            let digits = unit.ilog10() as usize;
            let s = format!("{whole}.{rest:0digits$}");
            s.trim_end_matches('0').to_string()
        }
    };
    let body = if u < 1_000 {
        format!("{u}ns")
    } else if u < 1_000_000 {
        format!("{}µs", frac(u, 1_000))
    } else if u < 1_000_000_000 {
        format!("{}ms", frac(u, 1_000_000))
    } else {
        let secs_total = u / 1_000_000_000;
        let h = secs_total / 3600;
        let m = (secs_total / 60) % 60;
        let s = frac(u % 60_000_000_000, 1_000_000_000);
        if h > 0 {
            format!("{h}h{m}m{s}s")
        } else if m > 0 {
            format!("{m}m{s}s")
        } else {
            format!("{s}s")
        }
    };
    if neg { format!("-{body}") } else { body }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// Hand-built wire bytes.
    fn key(tag: u32, wire: u8) -> Vec<u8> {
        varint(u64::from(tag) << 3 | u64::from(wire))
    }
    fn varint(mut v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return out;
            }
            out.push(b | 0x80);
        }
    }
    fn ld(tag: u32, body: &[u8]) -> Vec<u8> {
        let mut out = key(tag, 2);
        out.extend(varint(body.len() as u64));
        out.extend_from_slice(body);
        out
    }
    fn vi(tag: u32, v: u64) -> Vec<u8> {
        let mut out = key(tag, 0);
        out.extend(varint(v));
        out
    }
    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let mut tm = ld(1, api_version.as_bytes());
        tm.extend(ld(2, kind.as_bytes()));
        let mut out = MAGIC.to_vec();
        out.extend(ld(1, &tm));
        out.extend(ld(2, raw));
        out.extend(ld(3, b""));
        out.extend(ld(4, b""));
        out
    }

    #[test]
    fn table_loads_and_knows_the_served_kinds() {
        let t = table().unwrap();
        for (av, kind) in [
            ("v1", "Namespace"),
            ("v1", "Pod"),
            ("v1", "Binding"),
            ("v1", "Secret"),
            ("apps/v1", "Deployment"),
            ("batch/v1", "CronJob"),
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
            ("policy/v1", "Eviction"),
            ("authentication.k8s.io/v1", "TokenRequest"),
            ("scheduling.k8s.io/v1", "PriorityClass"),
            ("v1", "DeleteOptions"),
            ("storage.k8s.io/v1", "CSINode"),
            ("networking.k8s.io/v1", "IPAddress"),
            ("networking.k8s.io/v1", "ServiceCIDR"),
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
        ] {
            assert!(message_name(t, av, kind).is_some(), "{av} {kind}");
        }
        assert!(message_name(t, "example.com/v1", "Widget").is_none());
    }

    /// Bodies kubectl 1.32 sent (`kubectl create ...`), captured on the wire.
    const NAMESPACE_HEX: &str = "6b3873000a0f0a02763112094e616d657370616365121e0a160a067465616d2d6112001a0022002a0032003800420012001a020a001a002200";
    const SECRET_HEX: &str = "6b3873000a0c0a027631120653656372657412300a170a017312001a067465616d2d6122002a0032003800420012130a0870617373776f7264120768756e746572321a001a002200";
    const DEPLOYMENT_HEX: &str = "6b3873000a150a07617070732f7631120a4465706c6f796d656e7412b1010a250a0377656212001a067465616d2d6122002a003200380042005a0a0a036170701203776562127a0800120c0a0a0a0361707012037765621a600a1c0a0012001a0022002a003200380042005a0a0a036170701203776562124012220a056e67696e7812056e67696e782a0042006a007200800100880100900100a201001a00320042004a0052005800600068008201008a01009a0100c2010022020a00280038001a0c0800100018002000280038001a002200";
    const SERVICE_HEX: &str = "6b3873000a0d0a027631120753657276696365126f0a250a0373766312001a067465616d2d6122002a003200380042005a0a0a03617070120373766312420a1b0a0738302d38303830120354435018502207080010903f1a002800120a0a0361707012037376631a002209436c757374657249503a00420052005a00600068001a020a001a002200";
    const TOKEN_REQUEST_HEX: &str = "6b3873000a280a1861757468656e7469636174696f6e2e6b38732e696f2f7631120c546f6b656e52657175657374121a0a100a0012001a0022002a0032003800420012001a040a0012001a002200";

    #[test]
    fn kubectl_bodies_decode_to_the_json_kubectl_would_send() {
        let v = decode(&hex(NAMESPACE_HEX)).unwrap();
        assert_eq!(v, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}, "spec": {}, "status": {}}));

        let v = decode(&hex(SECRET_HEX)).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "team-a"}, "data": {"password": "aHVudGVyMg=="}})
        );

        // `kubectl create deployment web --image=nginx --replicas=0`
        let v = decode(&hex(DEPLOYMENT_HEX)).unwrap();
        assert_eq!(v["metadata"], json!({"name": "web", "namespace": "team-a", "labels": {"app": "web"}}));
        assert_eq!(v["spec"]["replicas"], 0);
        assert_eq!(v["spec"]["selector"], json!({"matchLabels": {"app": "web"}}));
        assert_eq!(v["spec"]["strategy"], json!({}));
        assert_eq!(v["spec"]["template"]["metadata"], json!({"labels": {"app": "web"}}));
        assert_eq!(
            v["spec"]["template"]["spec"],
            json!({"containers": [{"name": "nginx", "image": "nginx", "resources": {}}]})
        );
        assert_eq!(v["status"], json!({}));

        // `kubectl create service clusterip svc --tcp=80:8080`
        let v = decode(&hex(SERVICE_HEX)).unwrap();
        assert_eq!(v["spec"]["ports"], json!([{"name": "80-8080", "protocol": "TCP", "port": 80, "targetPort": 8080}]));
        assert_eq!(v["spec"]["type"], "ClusterIP");
        assert_eq!(v["spec"]["selector"], json!({"app": "svc"}));

        let v = decode(&hex(TOKEN_REQUEST_HEX)).unwrap();
        // status.token has no omitempty: Go writes "token": "" in JSON too.
        assert_eq!(v, json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "metadata": {}, "spec": {}, "status": {"token": ""}}));
    }

    #[test]
    fn zero_values_follow_go_pointers_and_omitempty() {
        // DeploymentSpec: replicas (pointer) 0 kept; minReadySeconds (non-pointer, omitempty) 0 dropped;
        // paused false dropped; strategy {} kept (a struct).
        let mut spec = vi(1, 0);
        spec.extend(vi(5, 0));
        spec.extend(vi(7, 0));
        spec.extend(ld(4, &ld(1, b"")));
        // PodTemplateSpec.spec: schedulerName "" dropped, automountServiceAccountToken false kept.
        let mut pod_spec = ld(19, b"");
        pod_spec.extend(vi(21, 0));
        let mut meta = ld(1, b"web");
        meta.extend(ld(3, b""));
        meta.extend(ld(8, b""));
        let mut tmpl = ld(1, b"");
        tmpl.extend(ld(2, &pod_spec));
        spec.extend(ld(3, &tmpl));
        let mut raw = ld(1, &meta);
        raw.extend(ld(2, &spec));
        raw.extend(ld(3, b""));
        let v = decode(&envelope("apps/v1", "Deployment", &raw)).unwrap();
        assert_eq!(
            v,
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web"},
                "spec": {"replicas": 0, "strategy": {}, "template": {"metadata": {}, "spec": {"automountServiceAccountToken": false}}},
                "status": {}
            })
        );
    }

    #[test]
    fn well_known_types_maps_bytes_and_negatives() {
        // Secret: data map<string, bytes>; metadata.creationTimestamp set; labels map.
        let mut meta = ld(1, b"s");
        let mut ts = vi(1, 1_700_000_000);
        ts.extend(vi(2, 0));
        meta.extend(ld(8, &ts));
        let mut entry = ld(1, b"app");
        entry.extend(ld(2, b"web"));
        meta.extend(ld(11, &entry));
        let mut raw = ld(1, &meta);
        let mut data = ld(1, b"password");
        data.extend(ld(2, b"hunter2"));
        raw.extend(ld(2, &data));
        let v = decode(&envelope("v1", "Secret", &raw)).unwrap();
        assert_eq!(v["data"]["password"], "aHVudGVyMg==");
        assert_eq!(v["metadata"]["creationTimestamp"], "2023-11-14T22:13:20Z");
        assert_eq!(v["metadata"]["labels"]["app"], "web");

        // ServicePort: targetPort IntOrString (string), nodePort 0 dropped; a negative int32.
        let mut ios = vi(1, 1);
        ios.extend(ld(3, b"http"));
        let mut port = ld(1, b"web");
        port.extend(vi(3, 80));
        port.extend(ld(4, &ios));
        port.extend(vi(5, 0));
        let spec = ld(1, &port);
        let mut raw = ld(1, &ld(1, b"svc"));
        raw.extend(ld(2, &spec));
        let v = decode(&envelope("v1", "Service", &raw)).unwrap();
        assert_eq!(v["spec"]["ports"], json!([{"name": "web", "port": 80, "targetPort": "http"}]));

        // PriorityClass value -5 (int32 sign-extended to 10 bytes).
        let mut raw = ld(1, &ld(1, b"low"));
        raw.extend(vi(2, (-5i64) as u64));
        let v = decode(&envelope("scheduling.k8s.io/v1", "PriorityClass", &raw)).unwrap();
        assert_eq!(v["value"], -5);

        // Quantities in a map of messages.
        let mut q = ld(1, b"cpu");
        q.extend(ld(2, &ld(1, b"500m")));
        let rr = ld(2, &q);
        let c = {
            let mut c = ld(1, b"app");
            c.extend(ld(8, &rr));
            c
        };
        let mut raw = ld(1, &ld(1, b"p"));
        raw.extend(ld(2, &ld(2, &c)));
        let v = decode(&envelope("v1", "Pod", &raw)).unwrap();
        assert_eq!(v["spec"]["containers"][0]["resources"]["requests"]["cpu"], "500m");

        assert_eq!(go_duration(90_000_000_000), "1m30s");
        assert_eq!(go_duration(1_500_000), "1.5ms");
        assert_eq!(go_duration(3_600_000_000_000), "1h0m0s");
    }

    #[test]
    fn subresource_bodies() {
        // pods/eviction: Eviction{metadata{name}, deleteOptions{gracePeriodSeconds: 0}} keeps the set pointer.
        let mut raw = ld(1, &ld(1, b"p"));
        raw.extend(ld(2, &vi(1, 0)));
        let v = decode(&envelope("policy/v1", "Eviction", &raw)).unwrap();
        assert_eq!(v, json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"}, "deleteOptions": {"gracePeriodSeconds": 0}}));
        // pods/binding: Binding{metadata{name}, target{kind, name}}.
        let mut target = ld(1, b"Node");
        target.extend(ld(3, b"n1"));
        let mut raw = ld(1, &ld(1, b"p"));
        raw.extend(ld(2, &target));
        let v = decode(&envelope("v1", "Binding", &raw)).unwrap();
        assert_eq!(v["target"], json!({"kind": "Node", "name": "n1"}));
        // DeleteOptions sent under a group version falls back to meta/v1's message.
        let v = decode(&envelope("v1", "DeleteOptions", &ld(4, b"Foreground"))).unwrap();
        assert_eq!(v["propagationPolicy"], "Foreground");
    }

    #[test]
    fn deep_nesting_is_refused_and_json_is_raw() {
        // JSONSchemaProps.not (28) nested 150 deep.
        let mut raw = ld(5, b"object");
        for _ in 0..150 {
            raw = ld(28, &raw);
        }
        let e = decode(&envelope("apiextensions.k8s.io/v1", "JSONSchemaProps", &raw)).unwrap_err();
        assert!(e.to_string().contains("nested deeper"), "{e}");
        // JSONSchemaProps.default (JSON, 8) is its raw JSON.
        let v = decode(&envelope("apiextensions.k8s.io/v1", "JSONSchemaProps", &ld(8, &ld(1, br#"{"a":[1]}"#)))).unwrap();
        assert_eq!(v["default"], json!({"a": [1]}));
    }

    #[test]
    fn inline_embedded_structs() {
        // Volume{name, VolumeSource{emptyDir{}}} -> {"name", "emptyDir": {}}
        let mut vol = ld(1, b"scratch");
        vol.extend(ld(2, &ld(2, b"")));
        let mut raw = ld(1, &ld(1, b"p"));
        raw.extend(ld(2, &ld(1, &vol)));
        let v = decode(&envelope("v1", "Pod", &raw)).unwrap();
        assert_eq!(v["spec"]["volumes"], json!([{"name": "scratch", "emptyDir": {}}]));
    }

    #[test]
    fn malformed_bodies_are_errors_naming_the_place() {
        assert!(matches!(decode(b"{\"kind\":1}"), Err(Error::Magic)));
        let e = decode(&envelope("example.com/v1", "Widget", b"")).unwrap_err();
        assert!(e.unsupported_media_type(), "{e}");
        // Truncated length inside metadata.
        let raw = [0x0a, 0x05, 0x0a, 0x09, b'a'];
        let e = decode(&envelope("v1", "Namespace", &raw)).unwrap_err();
        assert!(e.to_string().contains("Namespace.metadata"), "{e}");
        // Wrong wire type for a string.
        let raw = ld(1, &vi(1, 7));
        let e = decode(&envelope("v1", "Namespace", &raw)).unwrap_err();
        assert!(e.to_string().contains("Namespace.metadata.name"), "{e}");
        // Compressed raw.
        let mut body = envelope("v1", "Namespace", b"");
        body.extend(ld(3, b"gzip"));
        assert!(matches!(decode(&body), Err(Error::ContentEncoding(_))));
    }

    proptest::proptest! {
        #[test]
        fn random_bytes_never_panic(raw in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
            let _ = decode(&envelope("v1", "Pod", &raw));
            let _ = decode(&envelope("apps/v1", "Deployment", &raw));
            let mut body = MAGIC.to_vec();
            body.extend_from_slice(&raw);
            let _ = decode(&body);
        }

        #[test]
        fn mutated_real_bodies_never_panic(pos in 0usize..64, byte in proptest::num::u8::ANY) {
            let mut body = hex(NAMESPACE_HEX);
            if pos < body.len() {
                body[pos] = byte;
            }
            let _ = decode(&body);
        }
    }
}
