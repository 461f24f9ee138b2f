//! Attribute macros of anarchon: `#[anarchon::jobs]` on an `impl` block turns its methods
//! marked `#[every("10s")]`, `#[cron("0 9 * * *")]` or `#[at("2027-01-01T00:00:00Z")]` into
//! scheduled jobs. Use it through the `anarchon` crate (`anarchon::jobs`); the runtime side
//! is `anarchon::registration` and `Scheduler::register`.
//!
//! ```
//! use std::sync::Arc;
//! use anarchon::{memory::MemoryStore, HandlerError, JobContext, Scheduler};
//! use anarchon::registration::Registration;
//!
//! struct Reports {
//!     tenant: String,
//! }
//!
//! #[anarchon::jobs]
//! impl Reports {
//!     #[every("10s", jitter = "1s")]
//!     async fn refresh(&self, ctx: JobContext) -> Result<(), HandlerError> {
//!         ctx.check_cancelled()?;
//!         println!("refresh {} for slot {}", self.tenant, ctx.slot);
//!         Ok(())
//!     }
//!
//!     #[cron("0 9 * * 1-5", timezone = "Europe/Berlin", name = "morning", timeout = "10m")]
//!     async fn morning_report(&self, _ctx: JobContext) -> Result<(), HandlerError> {
//!         Ok(())
//!     }
//! }
//!
//! let scheduler = Scheduler::leased(MemoryStore::new()).build()?;
//! let reports = Arc::new(Reports { tenant: "acme".into() });
//! scheduler.register(reports, Registration::new().prefix("acme"))?;
//! let names: Vec<String> = scheduler.jobs().iter().map(|j| j.name.to_string()).collect();
//! assert_eq!(names, ["acme-Reports-refresh", "acme-morning"]);
//! # Ok::<_, anarchon::Error>(())
//! ```
//!
//! # The attributes
//! The first argument is the schedule, a string literal checked at compile time with the
//! parser the runtime uses: an interval for `every` (`"250ms"`, `"10s"`, `"1h30m"`), five or
//! six cron fields for `cron`, an RFC 3339 instant for `at`. Then, as `key = literal`:
//!
//! | key | value | jobs |
//! |---|---|---|
//! | `name` | the job name instead of `Type-method` | all |
//! | `timeout`, `jitter`, `max_late` | a length (`"30s"`) | all |
//! | `history_size` | an integer | all |
//! | `history_ttl`, `catch_up_window` | a length | all (lease stores) |
//! | `max_attempts` | an integer | all (lease stores) |
//! | `catch_up` | `"latest"`, `"none"` or `"all"` (with `catch_up_max = N`) | all (lease stores) |
//! | `overlap` | `"skip"` or `"allow"` | `every`, `cron` (lease stores) |
//! | `offset` | a length | `every` |
//! | `timezone` | an IANA name (`"Europe/Berlin"`) | `cron` |
//! | `allow_past` | `true` or `false` | `at` |
//! | `scheduler` | the registry scheduler the job belongs to | all |
//!
//! A method must be `async`, take `&self` and a `JobContext`, and return
//! `Result<(), E>` where `E` converts into `HandlerError` (`HandlerError` itself, or any
//! `std::error::Error`). Anything else, an unknown key, a bad literal or an option that does
//! not apply to the kind of job is a compile error pointing at the attribute. Lease-only
//! options on a claim-only scheduler are refused when the object is registered.
//!
//! `#[anarchon::jobs(crate = "path")]` names the crate the generated code refers to (default
//! `::anarchon`), for code that depends on `anarchon-core` directly.

use std::collections::BTreeMap;
use std::time::Duration;

use anarchon_core::options::{JobOptions, MAX_AT_MS, MAX_DURATION};
use anarchon_core::slot::{Schedule, parse_interval, parse_length, parse_timezone};
use anarchon_core::{
    CatchUp, Error as CoreError, JobConfig, JobKind, JobName, Overlap, StoreShape,
};
use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{quote, quote_spanned};
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned;
use syn::{Attribute, FnArg, ImplItem, ImplItemFn, ItemImpl, Lit, LitStr, ReturnType, Token, Type};

/// Turns the methods of an `impl` block marked `#[every(...)]`, `#[cron(...)]` or
/// `#[at(...)]` into jobs, by implementing `anarchon::registration::Jobs` for the type.
/// See the crate docs for the attributes.
#[proc_macro_attribute]
pub fn jobs(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr.into(), item.into()).into()
}

const KINDS: [&str; 3] = ["every", "cron", "at"];

const KEYS: &str = "name, timeout, jitter, max_late, history_size, history_ttl, \
                    catch_up_window, max_attempts, catch_up, catch_up_max, overlap, offset, \
                    timezone, allow_past, scheduler";

fn expand(attr: TokenStream2, item: TokenStream2) -> TokenStream2 {
    let mut item: ItemImpl = match syn::parse2(item) {
        Ok(item) => item,
        Err(_) => {
            return syn::Error::new(
                Span::call_site(),
                "#[anarchon::jobs] goes on an `impl` block: `#[anarchon::jobs] impl Reports { ... }`",
            )
            .to_compile_error();
        }
    };
    let mut errors: Vec<syn::Error> = Vec::new();
    let krate = match crate_path(attr) {
        Ok(path) => path,
        Err(e) => {
            errors.push(e);
            syn::parse_quote!(::anarchon)
        }
    };
    if let Some((_, path, _)) = &item.trait_ {
        errors.push(syn::Error::new_spanned(
            path,
            "#[anarchon::jobs] goes on an inherent `impl` block (`impl Reports { ... }`), not a trait impl",
        ));
    }
    let type_name = match type_name(&item.self_ty) {
        Ok(name) => name,
        Err(e) => {
            errors.push(e);
            String::from("Type")
        }
    };

    let mut specs = Vec::new();
    for impl_item in &mut item.items {
        let ImplItem::Fn(method) = impl_item else {
            continue;
        };
        let (marks, rest): (Vec<Attribute>, Vec<Attribute>) = method
            .attrs
            .drain(..)
            .partition(|a| KINDS.iter().any(|k| a.path().is_ident(k)));
        method.attrs = rest;
        let mut marks = marks.into_iter();
        let Some(mark) = marks.next() else {
            continue;
        };
        for extra in marks {
            errors.push(syn::Error::new_spanned(
                &extra,
                format!(
                    "`{}` has a second schedule attribute: one method is one job; write a second method for a second schedule",
                    method.sig.ident
                ),
            ));
        }
        match job_spec(&krate, &type_name, method, &mark) {
            Ok(spec) => specs.push(spec),
            Err(e) => errors.push(e),
        }
    }

    let errors = errors.into_iter().map(|e| e.to_compile_error());
    let (impl_generics, _, where_clause) = item.generics.split_for_impl();
    let self_ty = &item.self_ty;
    let jobs_impl = if item.trait_.is_none() {
        quote! {
            impl #impl_generics #krate::registration::Jobs for #self_ty #where_clause {
                fn jobs() -> ::std::vec::Vec<#krate::registration::JobSpec<Self>> {
                    ::std::vec![#(#specs),*]
                }
            }
        }
    } else {
        TokenStream2::new()
    };
    quote! {
        #item
        #jobs_impl
        #(#errors)*
    }
}

/// `crate = "path"`, the only argument of `#[anarchon::jobs]`.
fn crate_path(attr: TokenStream2) -> syn::Result<syn::Path> {
    let mut path: syn::Path = syn::parse_quote!(::anarchon);
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("crate") {
            let text: LitStr = meta.value()?.parse()?;
            path = text.parse()?;
            Ok(())
        } else {
            Err(meta
                .error("unknown argument of #[anarchon::jobs]: the only one is `crate = \"path\"`"))
        }
    });
    syn::parse::Parser::parse2(parser, attr)?;
    Ok(path)
}

/// The last segment of the type's path: `Reports` in `impl crate::Reports<T>`.
fn type_name(ty: &Type) -> syn::Result<String> {
    if let Type::Path(path) = ty
        && let Some(last) = path.path.segments.last()
    {
        return Ok(last.ident.to_string());
    }
    Err(syn::Error::new_spanned(
        ty,
        "#[anarchon::jobs] needs a named type (`impl Reports { ... }`) to name its jobs `Type-method`",
    ))
}

/// The arguments of one schedule attribute: the schedule, then `key = literal` options.
struct JobArgs {
    schedule: LitStr,
    options: Vec<(syn::Ident, Lit)>,
}

impl Parse for JobArgs {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let schedule: LitStr = input.parse().map_err(|e| {
            syn::Error::new(
                e.span(),
                "the schedule comes first, as a string literal: #[every(\"10s\")], \
                 #[cron(\"0 9 * * *\")], #[at(\"2027-01-01T00:00:00Z\")]",
            )
        })?;
        let mut options = Vec::new();
        while !input.is_empty() {
            input.parse::<Token![,]>()?;
            if input.is_empty() {
                break;
            }
            let key: syn::Ident = input.parse()?;
            input.parse::<Token![=]>().map_err(|e| {
                syn::Error::new(e.span(), format!("write the option as `{key} = value`"))
            })?;
            let value: Lit = input.parse()?;
            options.push((key, value));
        }
        Ok(JobArgs { schedule, options })
    }
}

fn kind_of(mark: &Attribute) -> JobKind {
    if mark.path().is_ident("every") {
        JobKind::Every
    } else if mark.path().is_ident("cron") {
        JobKind::Cron
    } else {
        JobKind::At
    }
}

/// Options read from an attribute, with the span of each key for errors.
#[derive(Default)]
struct Options {
    config: JobConfig,
    name: Option<LitStr>,
    scheduler: Option<LitStr>,
    catch_up: Option<LitStr>,
    catch_up_max: Option<syn::LitInt>,
    spans: BTreeMap<String, Span>,
}

fn lit_str(key: &syn::Ident, value: &Lit) -> syn::Result<LitStr> {
    match value {
        Lit::Str(s) => Ok(s.clone()),
        other => Err(syn::Error::new_spanned(
            other,
            format!("`{key}` takes a string literal"),
        )),
    }
}

fn length(key: &syn::Ident, value: &Lit) -> syn::Result<Duration> {
    let text = lit_str(key, value)?;
    parse_length(&text.value()).map_err(|e| syn::Error::new_spanned(&text, format!("`{key}`: {e}")))
}

fn int<N: std::str::FromStr>(key: &syn::Ident, value: &Lit) -> syn::Result<N>
where
    N::Err: std::fmt::Display,
{
    match value {
        Lit::Int(i) => i.base10_parse(),
        other => Err(syn::Error::new_spanned(
            other,
            format!("`{key}` takes an integer literal"),
        )),
    }
}

fn read_options(args: &JobArgs) -> syn::Result<Options> {
    let mut o = Options::default();
    for (key, value) in &args.options {
        let k = key.to_string();
        if o.spans.insert(k.clone(), key.span()).is_some() {
            return Err(syn::Error::new_spanned(
                key,
                format!("option `{k}` is given twice"),
            ));
        }
        let c = &mut o.config;
        match k.as_str() {
            "name" => o.name = Some(lit_str(key, value)?),
            "scheduler" => o.scheduler = Some(lit_str(key, value)?),
            "timeout" => c.timeout = Some(length(key, value)?),
            "jitter" => c.jitter = Some(length(key, value)?),
            "max_late" => c.max_late = Some(length(key, value)?),
            "history_ttl" => c.history_ttl = Some(length(key, value)?),
            "catch_up_window" => c.catch_up_window = Some(length(key, value)?),
            "offset" => c.offset = Some(length(key, value)?),
            "history_size" => c.history_size = Some(int(key, value)?),
            "max_attempts" => c.max_attempts = Some(int(key, value)?),
            "overlap" => {
                let text = lit_str(key, value)?;
                c.overlap = Some(match text.value().as_str() {
                    "skip" => Overlap::Skip,
                    "allow" => Overlap::Allow,
                    _ => {
                        return Err(syn::Error::new_spanned(
                            &text,
                            "`overlap` is \"skip\" or \"allow\"",
                        ));
                    }
                });
            }
            "catch_up" => {
                let text = lit_str(key, value)?;
                if !["latest", "none", "all"].contains(&text.value().as_str()) {
                    return Err(syn::Error::new_spanned(
                        &text,
                        "`catch_up` is \"latest\", \"none\" or \"all\" (with `catch_up_max = N`)",
                    ));
                }
                o.catch_up = Some(text);
            }
            "catch_up_max" => {
                if let Lit::Int(i) = value {
                    o.catch_up_max = Some(i.clone());
                } else {
                    return Err(syn::Error::new_spanned(
                        value,
                        "`catch_up_max` takes an integer literal",
                    ));
                }
            }
            "timezone" => {
                let text = lit_str(key, value)?;
                let tz = parse_timezone(&text.value())
                    .map_err(|e| syn::Error::new_spanned(&text, e.to_string()))?;
                c.timezone = Some(tz);
            }
            "allow_past" => match value {
                Lit::Bool(b) => c.allow_past = Some(b.value),
                other => {
                    return Err(syn::Error::new_spanned(
                        other,
                        "`allow_past` is `true` or `false`",
                    ));
                }
            },
            _ => {
                return Err(syn::Error::new_spanned(
                    key,
                    format!("unknown option `{k}`; the options are: {KEYS}"),
                ));
            }
        }
    }
    match (&o.catch_up, &o.catch_up_max) {
        (Some(text), max) if text.value() == "all" => {
            let Some(max) = max else {
                return Err(syn::Error::new_spanned(
                    text,
                    "`catch_up = \"all\"` needs its cap: add `catch_up_max = N`",
                ));
            };
            o.config.catch_up = Some(CatchUp::All {
                max: max.base10_parse()?,
            });
        }
        (Some(text), Some(max)) => {
            return Err(syn::Error::new_spanned(
                max,
                format!(
                    "`catch_up_max` goes with `catch_up = \"all\"`, not {:?}",
                    text.value()
                ),
            ));
        }
        (Some(text), None) => {
            o.config.catch_up = Some(if text.value() == "none" {
                CatchUp::None
            } else {
                CatchUp::Latest
            });
        }
        (None, Some(max)) => {
            return Err(syn::Error::new_spanned(
                max,
                "`catch_up_max` goes with `catch_up = \"all\"`",
            ));
        }
        (None, None) => {}
    }
    Ok(o)
}

/// The span of the option an error of the runtime's checks names, else the attribute's.
fn option_error(o: &Options, error: &CoreError, mark: &Attribute) -> syn::Error {
    let option = match error {
        CoreError::InvalidOption { option, .. } | CoreError::OutOfRange { option, .. } => *option,
        _ => "",
    };
    match o.spans.get(option) {
        Some(span) => syn::Error::new(*span, error.to_string()),
        None => syn::Error::new_spanned(mark, error.to_string()),
    }
}

/// Checks the options with the runtime's own validation: those that do not apply to the
/// kind of job, lengths and counts out of range, jitter above max_late when both are set.
fn check_options(o: &Options, kind: JobKind, mark: &Attribute) -> syn::Result<()> {
    let err = |e: CoreError| option_error(o, &e, mark);
    o.config
        .validate(StoreShape::Leased, "any", kind)
        .map_err(err)?;
    let mut opts = JobOptions {
        jitter: Duration::ZERO,
        max_late: MAX_DURATION,
        ..JobOptions::default()
    };
    o.config.apply(&mut opts);
    opts.validate().map_err(err)
}

fn duration(d: Duration) -> TokenStream2 {
    let (secs, nanos) = (d.as_secs(), d.subsec_nanos());
    quote!(::core::time::Duration::new(#secs, #nanos))
}

fn job_spec(
    krate: &syn::Path,
    type_name: &str,
    method: &ImplItemFn,
    mark: &Attribute,
) -> syn::Result<TokenStream2> {
    let kind = kind_of(mark);
    let args: JobArgs = mark.parse_args().map_err(|e| {
        if matches!(mark.meta, syn::Meta::Path(_)) {
            syn::Error::new_spanned(
                mark,
                format!("#[{kind}] needs its schedule: #[every(\"10s\")], #[cron(\"0 9 * * *\")], #[at(\"2027-01-01T00:00:00Z\")]"),
            )
        } else {
            e
        }
    })?;
    check_signature(method, mark)?;
    let o = read_options(&args)?;
    check_options(&o, kind, mark)?;

    let schedule = &args.schedule;
    let text = schedule.value();
    let trigger = match kind {
        JobKind::Every => {
            let interval = parse_interval(&text)
                .map_err(|e| syn::Error::new_spanned(schedule, e.to_string()))?;
            let offset = o
                .config
                .offset
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
            Schedule::every(interval, offset)
                .map_err(|e| syn::Error::new_spanned(schedule, e.to_string()))?;
            let interval = duration(interval);
            quote!(#krate::registration::Trigger::Every(#interval))
        }
        JobKind::Cron => {
            let tz = o.config.timezone.map(|tz| tz.name());
            Schedule::cron(&text, tz)
                .map_err(|e| syn::Error::new_spanned(schedule, e.to_string()))?;
            quote!(#krate::registration::Trigger::Cron(::std::string::String::from(#schedule)))
        }
        _ => {
            let at_ms = match Schedule::at_str(&text)
                .map_err(|e| syn::Error::new_spanned(schedule, e.to_string()))?
            {
                Schedule::At { at_ms } => at_ms,
                _ => unreachable!("at_str makes an `at` schedule"),
            };
            if !(0..=MAX_AT_MS).contains(&at_ms) {
                return Err(syn::Error::new_spanned(
                    schedule,
                    "an `at` time lies between 1970-01-01T00:00:00Z and 5000-01-01T00:00:00Z \
                     (the last instant a cron schedule yields)",
                ));
            }
            quote!(#krate::registration::Trigger::At(#krate::registration::__private::at(#at_ms)))
        }
    };

    let method_name = &method.sig.ident;
    let name = match &o.name {
        Some(name) => {
            JobName::new(name.value()).map_err(|e| syn::Error::new_spanned(name, e.to_string()))?;
            name.value()
        }
        None => {
            let name = format!("{type_name}-{method_name}");
            JobName::new(&name).map_err(|e| {
                syn::Error::new_spanned(
                    mark,
                    format!("{e}; give the job a name with `name = \"...\"`"),
                )
            })?;
            name
        }
    };

    let options = options_tokens(krate, &o);
    let scheduler = o.scheduler.as_ref().map(|s| quote!(.scheduler(#s)));
    let ctx_span = match method.sig.inputs.iter().nth(1) {
        Some(FnArg::Typed(arg)) => arg.ty.span(),
        _ => method_name.span(),
    };
    let ret_span = match &method.sig.output {
        ReturnType::Type(_, ty) => ty.span(),
        ReturnType::Default => method_name.span(),
    };
    let call = quote_spanned!(ctx_span=> this.#method_name(ctx));
    let result =
        quote_spanned!(ret_span=> #krate::registration::__private::into_result(#call.await));
    Ok(quote! {
        #krate::registration::JobSpec::<Self>::new(
            #name,
            #trigger,
            #options,
            |this: ::std::sync::Arc<Self>, ctx: #krate::JobContext| -> #krate::registration::JobFuture {
                ::std::boxed::Box::pin(async move { #result })
            },
        ) #scheduler
    })
}

/// `async fn name(&self, ctx: JobContext) -> Result<(), E>`.
fn check_signature(method: &ImplItemFn, mark: &Attribute) -> syn::Result<()> {
    let sig = &method.sig;
    let name = &sig.ident;
    let wrong = |what: &str| {
        syn::Error::new_spanned(
            mark,
            format!(
                "`{name}` {what}: a job method is `async fn {name}(&self, ctx: JobContext) -> Result<(), HandlerError>`"
            ),
        )
    };
    if sig.asyncness.is_none() {
        return Err(wrong("is not async"));
    }
    if !sig.generics.params.is_empty() {
        return Err(wrong("has generic parameters"));
    }
    match sig.inputs.first() {
        Some(FnArg::Receiver(r)) if r.reference.is_some() && r.mutability.is_none() => {}
        Some(FnArg::Receiver(_)) => return Err(wrong("must take `&self`")),
        _ => return Err(wrong("takes no `&self`")),
    }
    if sig.inputs.len() != 2 {
        return Err(wrong("must take exactly `&self` and a `JobContext`"));
    }
    if matches!(sig.output, ReturnType::Default) {
        return Err(wrong("returns nothing"));
    }
    Ok(())
}

fn options_tokens(krate: &syn::Path, o: &Options) -> TokenStream2 {
    let c = &o.config;
    let mut sets = Vec::new();
    let some = |v: TokenStream2| quote!(::core::option::Option::Some(#v));
    for (field, value) in [
        ("jitter", c.jitter),
        ("max_late", c.max_late),
        ("history_ttl", c.history_ttl),
        ("timeout", c.timeout),
        ("catch_up_window", c.catch_up_window),
        ("offset", c.offset),
    ] {
        if let Some(d) = value {
            let field = syn::Ident::new(field, Span::call_site());
            let v = some(duration(d));
            sets.push(quote!(options.#field = #v;));
        }
    }
    if let Some(n) = c.history_size {
        let v = some(quote!(#n));
        sets.push(quote!(options.history_size = #v;));
    }
    if let Some(n) = c.max_attempts {
        let v = some(quote!(#n));
        sets.push(quote!(options.max_attempts = #v;));
    }
    if let Some(overlap) = c.overlap {
        let v = match overlap {
            Overlap::Allow => quote!(#krate::Overlap::Allow),
            _ => quote!(#krate::Overlap::Skip),
        };
        let v = some(v);
        sets.push(quote!(options.overlap = #v;));
    }
    if let Some(catch_up) = c.catch_up {
        let v = match catch_up {
            CatchUp::All { max } => quote!(#krate::CatchUp::All { max: #max }),
            CatchUp::None => quote!(#krate::CatchUp::None),
            _ => quote!(#krate::CatchUp::Latest),
        };
        let v = some(v);
        sets.push(quote!(options.catch_up = #v;));
    }
    if let Some(tz) = c.timezone {
        let name = tz.name();
        let v = some(quote!(#krate::registration::__private::timezone(#name)));
        sets.push(quote!(options.timezone = #v;));
    }
    if let Some(b) = c.allow_past {
        let v = some(quote!(#b));
        sets.push(quote!(options.allow_past = #v;));
    }
    quote! {{
        #[allow(unused_mut)]
        let mut options = #krate::JobConfig::default();
        #(#sets)*
        options
    }}
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Reads the options of an attribute given as text (`"10s", timeout = "5s"`).
    fn options(text: &str) -> syn::Result<Options> {
        read_options(&syn::parse_str::<JobArgs>(text)?)
    }

    #[test]
    fn lengths_read_as_the_runtime_reads_them() {
        let o = options(r#""10s", timeout = "1m30s", jitter = "0""#).unwrap();
        assert_eq!(o.config.timeout, Some(Duration::from_secs(90)));
        assert_eq!(o.config.jitter, Some(Duration::ZERO));
        for bad in ["0smhd", "0sm", "ms", "0x", ""] {
            let text = format!(r#""10s", jitter = "{bad}""#);
            let err = options(&text).map(|_| ()).unwrap_err().to_string();
            assert!(
                err.contains("`jitter`") && err.contains(&format!("{bad:?}")),
                "{bad:?}: {err}"
            );
        }
    }

    #[test]
    fn timezones_read_as_cron_reads_them() {
        let o = options(r#""0 9 * * *", timezone = " Europe/Berlin ""#).unwrap();
        assert_eq!(
            o.config.timezone,
            Some(anarchon_core::chrono_tz::Europe::Berlin)
        );
        let err = options(r#""0 9 * * *", timezone = "Europe/ Berlin""#)
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(err.contains("Europe/ Berlin"), "{err}");
    }

    /// Option values at the extremes: empty, zero, one nanosecond's worth, huge, and noise.
    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(String::new()),
            Just("0".to_owned()),
            Just("0smhd".to_owned()),
            Just("1ms".to_owned()),
            Just("18446744073709551615ms".to_owned()),
            Just("9223372036854775807ms".to_owned()),
            Just("106751991167300d".to_owned()),
            "[0-9]{1,25}(ms|s|m|h|d|)",
            "[0-9dhms ]{0,12}",
            "\\PC{0,12}",
        ]
    }

    fn key() -> impl Strategy<Value = &'static str> {
        prop::sample::select(vec![
            "timeout",
            "jitter",
            "max_late",
            "history_ttl",
            "catch_up_window",
            "offset",
            "timezone",
            "overlap",
            "catch_up",
            "name",
            "scheduler",
            "unknown",
        ])
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Any text in any option is read or refused with a compile error naming the option;
        /// the checks after it (the runtime's own validation) never panic either.
        #[test]
        fn options_at_extremes_are_read_or_refused_never_panic(
            pairs in prop::collection::vec((key(), value()), 0..4),
            int in prop_oneof![Just(0u64), Just(1), Just(u64::from(u32::MAX)), Just(u64::MAX)],
        ) {
            let mut text = r#""10s""#.to_owned();
            for (k, v) in &pairs {
                text.push_str(&format!(", {k} = {v:?}"));
            }
            text.push_str(&format!(", history_size = {int}"));
            if let Ok(args) = syn::parse_str::<JobArgs>(&text) {
                match read_options(&args) {
                    Ok(o) => {
                        let mark: Attribute = syn::parse_quote!(#[every("10s")]);
                        let _ = check_options(&o, JobKind::Every, &mark);
                    }
                    Err(e) => prop_assert!(!e.to_string().is_empty()),
                }
            }
        }
    }
}
