//! Tidy checks on the workspace's own files, run as ordinary tests by `cargo test`.

use std::path::{Path, PathBuf};

use crate::util::project_root;

/// The Rust files git tracks (so a scratch file nobody committed does not fail the check);
/// outside a git checkout, every Rust file without build output and hidden folders.
fn tracked_rust_files(root: &Path) -> Vec<PathBuf> {
    let listed = std::process::Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["ls-files", "-z", "--", "*.rs"])
        .output()
        .ok()
        .filter(|out| out.status.success());
    match listed {
        Some(out) => String::from_utf8_lossy(&out.stdout)
            .split('\0')
            .filter(|name| !name.is_empty())
            .map(|name| root.join(name))
            .filter(|path| path.is_file())
            .collect(),
        None => {
            let mut found = Vec::new();
            rust_files(root, &mut found);
            found
        }
    }
}

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || name == "target" || name == "node_modules" {
            continue;
        }
        if path.is_dir() {
            rust_files(&path, found);
        } else if name.ends_with(".rs") {
            found.push(path);
        }
    }
}

#[test]
fn every_rust_file_opens_with_a_doc_line() {
    let root = project_root();
    let files = tracked_rust_files(&root);
    assert!(!files.is_empty(), "no Rust files under {}", root.display());
    let offenders: Vec<String> = files
        .iter()
        .filter(|path| {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            !text.trim_start().starts_with("//!")
        })
        .map(|path| {
            path.strip_prefix(&root)
                .unwrap_or(path)
                .display()
                .to_string()
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "these files do not open with a `//!` line saying what they are: {offenders:#?}"
    );
}

#[test]
fn every_package_inherits_the_workspace_lints() {
    let root = project_root();
    let mut manifests = vec![
        root.join("Cargo.toml"),
        root.join("xtask").join("Cargo.toml"),
    ];
    if let Ok(crates) = std::fs::read_dir(root.join("crates")) {
        manifests.extend(
            crates
                .flatten()
                .map(|entry| entry.path().join("Cargo.toml"))
                .filter(|p| p.is_file()),
        );
    }
    let offenders: Vec<String> = manifests
        .iter()
        .filter(|manifest| {
            let text = std::fs::read_to_string(manifest).unwrap_or_default();
            let lines: Vec<&str> = text.lines().map(str::trim).collect();
            let inherits = lines
                .windows(2)
                .any(|pair| pair[0] == "[lints]" && pair[1].replace(' ', "") == "workspace=true");
            !inherits
        })
        .map(|path| {
            path.strip_prefix(&root)
                .unwrap_or(path)
                .display()
                .to_string()
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "these manifests lack `[lints]` with `workspace = true`: {offenders:?}"
    );
}

/// `path` relative to `root`, with `/` between the parts on every platform.
fn relative(root: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(root).unwrap_or(path);
    rel.components()
        .map(|part| part.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

// ---------------------------------------------------------------------------------------
// Reading Rust source without a parser: enough to tell code from comments, strings and the
// test modules at the end of a file.
// ---------------------------------------------------------------------------------------

/// The item after the `#[cfg(test)]` line `n` of `lines` (other attributes may come
/// between), if that line is `#[cfg(test)]` at column 0.
fn test_item<'a>(lines: &[&'a str], n: usize) -> Option<&'a str> {
    // The simulation harness around the core (the core's tests and the dev-only feature
    // `sim`, crates/anarchon-sim) is test code too: it is the world the core runs in.
    if !matches!(
        lines[n].trim_end(),
        "#[cfg(test)]" | "#[cfg(any(test, feature = \"sim\"))]"
    ) {
        return None;
    }
    lines[n + 1..]
        .iter()
        .map(|l| l.trim())
        .find(|l| !l.is_empty() && !l.starts_with("#["))
}

/// Whether `item` declares a module: `mod x {`, `pub(crate) mod x;` ...
fn is_mod(item: &str) -> bool {
    item.split_whitespace().any(|word| word == "mod")
}

/// `text` up to its first `#[cfg(test)]` at column 0 that stands before an inline `mod`
/// (`mod tests {`): the test modules at the end of a file are left out. A test module in a
/// file of its own (`#[cfg(test)] mod tests;`) cuts nothing; see [`declared_for_tests`].
fn without_test_modules(text: &str) -> &str {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let mut offset = 0;
    for n in 0..lines.len() {
        if test_item(&lines, n).is_some_and(|item| is_mod(item) && !item.ends_with(';')) {
            return &text[..offset];
        }
        offset += lines[n].len();
    }
    text
}

/// Whether the file at `path` is a test module: its parent declares it under
/// `#[cfg(test)]` (`#[cfg(test)] mod tests;` in the `mod.rs` beside it or in the file named
/// after its folder).
fn declared_for_tests(path: &Path) -> bool {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (dir, name) = if stem == "mod" {
        let Some(dir) = path.parent() else {
            return false;
        };
        let name = dir
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        (dir.parent(), name)
    } else {
        (path.parent(), stem)
    };
    let Some(dir) = dir else { return false };
    let parents = [
        dir.join("mod.rs"),
        dir.with_extension("rs"),
        dir.join("lib.rs"),
    ];
    parents
        .iter()
        .filter(|p| p.as_path() != path)
        .any(|parent| {
            let text = std::fs::read_to_string(parent).unwrap_or_default();
            let lines: Vec<&str> = text.split_inclusive('\n').collect();
            (0..lines.len()).any(|n| {
                test_item(&lines, n).is_some_and(|item| {
                    is_mod(item)
                        && item.trim_end_matches(';').split_whitespace().last()
                            == Some(name.as_str())
                })
            })
        })
}

/// `code` with every comment (line, block, doc) blanked out, keeping line breaks and the
/// text of strings and character literals (so a `//` inside a string is not a comment).
fn strip_comments(code: &str) -> String {
    let chars: Vec<char> = code.chars().collect();
    let mut out = String::with_capacity(code.len());
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && (i == 0
                || !ident(chars[i - 1])
                || (chars[i - 1] == 'b' && (i < 2 || !ident(chars[i - 2]))))
            && matches!(next, Some('"' | '#'))
        {
            // A raw string: r"..." or r#"..."#, copied as it is.
            let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
            if chars.get(i + 1 + hashes) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let start = i;
            i += 2 + hashes;
            while i < chars.len() {
                if chars[i] == '"'
                    && chars[i + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|&&h| h == '#')
                        .count()
                        == hashes
                {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
            out.extend(&chars[start..i.min(chars.len())]);
        } else if c == '"' {
            out.push(c);
            i += 1;
            while i < chars.len() {
                out.push(chars[i]);
                if chars[i] == '\\' {
                    if let Some(&escaped) = chars.get(i + 1) {
                        out.push(escaped);
                    }
                    i += 2;
                    continue;
                }
                i += 1;
                if chars[i - 1] == '"' {
                    break;
                }
            }
        } else if c == '\'' && next == Some('\\') {
            // An escaped character literal ('\n', '\'', '\u{1F600}').
            let end = chars[i + 2..]
                .iter()
                .position(|&q| q == '\'')
                .map_or(chars.len(), |p| i + 3 + p);
            out.extend(&chars[i..end]);
            i = end;
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            // A character literal ('"', '{'); anything else after a quote is a lifetime.
            out.extend(&chars[i..i + 3]);
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// `code` with the function `name` (its signature and body) blanked out, keeping line
/// breaks; `None` when the code has no such function.
fn without_fn(code: &str, name: &str) -> Option<String> {
    let needle = format!("fn {name}");
    let start = code.match_indices(&needle).map(|(at, _)| at).find(|&at| {
        let before = code[..at].chars().next_back();
        let after = code[at + needle.len()..].chars().next();
        before.is_none_or(|c| !(c.is_alphanumeric() || c == '_'))
            && matches!(after, Some('(' | '<'))
    })?;
    let open = start + code[start..].find('{')?;
    let mut depth = 0usize;
    let mut end = None;
    for (at, c) in code[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    end = Some(open + at + 1);
                    break;
                }
            }
            _ => {}
        }
    }
    let end = end?;
    let blanked: String = code[start..end]
        .chars()
        .map(|c| if c == '\n' { '\n' } else { ' ' })
        .collect();
    Some(format!("{}{blanked}{}", &code[..start], &code[end..]))
}

// ---------------------------------------------------------------------------------------
// Purity: the pure modules of anarchon-core (slot math, options, the run machines, the
// instance's core) take time, randomness and store answers as arguments. Issue 20.
// ---------------------------------------------------------------------------------------

/// The pure files of anarchon-core that exist today; every file under `PURE_DIR` (and
/// `scheduler/core.rs`) is pure too.
const PURE_FILES: [&str; 4] = [
    "crates/anarchon-core/src/slot.rs",
    "crates/anarchon-core/src/options.rs",
    "crates/anarchon-core/src/scheduler/run.rs",
    "crates/anarchon-core/src/scheduler/watch.rs",
];

/// The instance's pure core: every Rust file under this folder.
const PURE_DIR: &str = "crates/anarchon-core/src/scheduler/core";

/// What a pure file's code (outside comments and test modules) must not name, and why.
const IMPURE: [(&str, &str); 9] = [
    ("tokio", "the async runtime"),
    (
        "Instant::now",
        "a read of the monotonic clock: take `now` as an argument",
    ),
    (
        "SystemTime::now",
        "a read of the system clock: take `now` as an argument",
    ),
    ("std::thread", "threads"),
    (
        "rand::",
        "a random generator of its own: take the RNG or a seed from the caller",
    ),
    (
        "dyn LeaseStore",
        "a store object: store calls are request values",
    ),
    (
        "dyn ClaimStore",
        "a store object: store calls are request values",
    ),
    (
        "dyn HistoryStore",
        "a store object: store calls are request values",
    ),
    ("Arc<dyn", "a shared trait object"),
];

/// Functions of pure files that may be impure for now: (file, function, why).
const IMPURE_FOR_NOW: [(&str, &str, &str); 0] = [];

/// How many of `PURE_FILES` exist, and where the pure files (those and the core's) name
/// something impure: `file:line: needle (why): code`.
fn impurities(root: &Path) -> (usize, Vec<String>) {
    let mut files: Vec<PathBuf> = PURE_FILES
        .iter()
        .map(|file| root.join(file))
        .filter(|path| path.is_file())
        .collect();
    let named = files.len();
    rust_files(&root.join(PURE_DIR), &mut files);
    let core_file = root.join(PURE_DIR).with_extension("rs");
    if core_file.is_file() {
        files.push(core_file);
    }
    // Test modules in files of their own are test code, as inline ones are.
    files.retain(|path| !declared_for_tests(path));
    let mut found = Vec::new();
    for path in &files {
        let rel = relative(root, path);
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{rel}: {e}"));
        let mut code = strip_comments(without_test_modules(&text));
        for (file, name, why) in IMPURE_FOR_NOW {
            if rel == file {
                code = without_fn(&code, name).unwrap_or_else(|| {
                    panic!(
                        "{rel} has no `fn {name}` any more: remove its exception ({why}) from \
                         IMPURE_FOR_NOW in xtask/src/tidy.rs"
                    )
                });
            }
        }
        for (n, line) in code.lines().enumerate() {
            for (needle, why) in IMPURE {
                if line.contains(needle) {
                    found.push(format!(
                        "{rel}:{}: `{needle}` ({why}): {}",
                        n + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    (named, found)
}

#[test]
fn pure_modules_read_no_clock_and_use_no_runtime_thread_rng_or_store_object() {
    let root = project_root();
    let (named, found) = impurities(&root);
    assert!(
        named > 0,
        "none of the pure files {PURE_FILES:?} exists, so the purity check checks nothing: \
         update PURE_FILES in xtask/src/tidy.rs to where the pure modules are now"
    );
    assert!(
        found.is_empty(),
        "pure modules must take time, randomness and store answers as arguments (issue 20); \
         found:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_purity_check_sees_code_but_not_comments_strings_or_tests() {
    let text = "use std::time::Duration; // tokio\n\
                /* Instant::now() /* nested */ std::thread */\n\
                fn pick() -> u64 { rand::random() }\n\
                fn keep() -> &'static str { \"// not a comment\" }\n\
                fn quote() -> char { '\"' } // after a quote: tokio\n\
                #[cfg(test)]\n\
                mod tests { use tokio; }\n";
    let code = strip_comments(without_test_modules(text));
    assert!(
        !code.contains("tokio") && !code.contains("Instant") && !code.contains("thread"),
        "{code}"
    );
    assert!(code.contains("\"// not a comment\""), "{code}");
    assert!(code.contains("rand::random"), "{code}");
    assert_eq!(code.lines().count(), 5, "line numbers are kept: {code}");
    let without = without_fn(&code, "pick").expect("pick is there");
    assert!(
        !without.contains("rand::") && without.contains("fn keep"),
        "{without}"
    );
    assert!(
        without_fn(&code, "pic").is_none(),
        "a prefix of a name is not the name"
    );
}

// ---------------------------------------------------------------------------------------
// Import circles between the files of anarchon-core's src/ (issue 20): `use` statements and
// paths in code that start with `crate::`, `super::`, `self::` or a child module, resolved
// through the re-exports of lib.rs and mod.rs files to the file that defines the item.
// ---------------------------------------------------------------------------------------

/// A token of Rust code, as far as paths need: names, `::`, braces and separators.
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    PathSep,
    Open,
    Close,
    Semi,
    Comma,
    Star,
    Other,
}

/// The tokens of comment-free `code`, skipping strings, characters and lifetimes.
fn tokens(code: &str) -> Vec<Tok> {
    let chars: Vec<char> = code.chars().collect();
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut toks = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if ident(c) {
            let start = i;
            while i < chars.len() && ident(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let hashes = chars[i..].iter().take_while(|&&h| h == '#').count();
            if matches!(word.as_str(), "r" | "br") && chars.get(i + hashes) == Some(&'"') {
                // A raw string.
                i += hashes + 1;
                while i < chars.len() {
                    if chars[i] == '"'
                        && chars[i + 1..]
                            .iter()
                            .take(hashes)
                            .filter(|&&h| h == '#')
                            .count()
                            == hashes
                    {
                        i += 1 + hashes;
                        break;
                    }
                    i += 1;
                }
                continue;
            }
            toks.push(Tok::Ident(word));
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '\'' {
            if chars.get(i + 1) == Some(&'\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                // A lifetime: the quote and its name.
                i += 1;
                while i < chars.len() && ident(chars[i]) {
                    i += 1;
                }
            }
        } else {
            toks.push(match c {
                ':' if chars.get(i + 1) == Some(&':') => {
                    i += 1;
                    Tok::PathSep
                }
                '{' => Tok::Open,
                '}' => Tok::Close,
                ';' => Tok::Semi,
                ',' => Tok::Comma,
                '*' => Tok::Star,
                _ => Tok::Other,
            });
            i += 1;
        }
    }
    toks
}

/// The paths a `use` tree names, each with the name it binds (`None` for a glob or `_`).
fn use_tree(
    toks: &[Tok],
    at: &mut usize,
    prefix: Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>)>,
) {
    let mut path = prefix;
    loop {
        match toks.get(*at) {
            Some(Tok::PathSep) => *at += 1,
            Some(Tok::Ident(name)) => {
                path.push(name.clone());
                *at += 1;
                if toks.get(*at) == Some(&Tok::PathSep) {
                    *at += 1;
                    continue;
                }
                if path.last().is_some_and(|last| last == "self") {
                    path.pop();
                }
                let mut bound = path.last().cloned();
                if toks.get(*at) == Some(&Tok::Ident("as".into())) {
                    bound = match toks.get(*at + 1) {
                        Some(Tok::Ident(alias)) if alias != "_" => Some(alias.clone()),
                        _ => None,
                    };
                    *at += 2;
                }
                out.push((path, bound));
                return;
            }
            Some(Tok::Open) => {
                *at += 1;
                while *at < toks.len() {
                    match toks[*at] {
                        Tok::Close => {
                            *at += 1;
                            return;
                        }
                        Tok::Comma => *at += 1,
                        _ => {
                            let before = *at;
                            use_tree(toks, at, path.clone(), out);
                            if *at == before {
                                *at += 1;
                            }
                        }
                    }
                }
                return;
            }
            Some(Tok::Star) => {
                *at += 1;
                out.push((path, None));
                return;
            }
            _ => return,
        }
    }
}

/// A path one file names: the module it is named from (a file's module, or an inline module
/// in it), its segments, and for a `use`, the name it binds.
#[derive(Debug)]
struct Named {
    from: Vec<String>,
    path: Vec<String>,
    bound: Option<String>,
    is_use: bool,
    /// A `pub`/`pub(crate)` ... `use`: in a `lib.rs` or `mod.rs`, a re-export.
    is_pub: bool,
}

/// One source file of the crate.
#[derive(Debug)]
struct SourceFile {
    rel: String,
    module: Vec<String>,
    /// `lib.rs` or `mod.rs`: its `pub use`s of its own submodules are re-exports, not
    /// imports.
    facade: bool,
    named: Vec<Named>,
    /// The inline modules (`mod x { ... }`) in it, by path.
    inline: Vec<Vec<String>>,
}

/// Reads one file (`rel` is its path under `src/`) for the paths it names.
fn source_file(rel: &str, text: &str) -> SourceFile {
    let mut module: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_owned)
        .collect();
    let last = module.pop().unwrap_or_default();
    let facade = last == "lib" || last == "mod";
    if !facade {
        module.push(last);
    }
    let toks = tokens(&strip_comments(without_test_modules(text)));
    let mut named = Vec::new();
    let mut inline = Vec::new();
    // The inline modules open here, with the brace depth inside each.
    let mut open: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < toks.len() {
        let here = || {
            let mut m = module.clone();
            m.extend(open.iter().map(|(name, _)| name.clone()));
            m
        };
        match &toks[i] {
            Tok::Open => depth += 1,
            Tok::Close => {
                if open.last().is_some_and(|(_, d)| *d == depth) {
                    open.pop();
                }
                depth -= 1;
            }
            Tok::Ident(word) if word == "mod" => {
                if let (Some(Tok::Ident(name)), Some(Tok::Open)) =
                    (toks.get(i + 1), toks.get(i + 2))
                {
                    let mut m = here();
                    m.push(name.clone());
                    inline.push(m);
                    open.push((name.clone(), depth + 1));
                    depth += 1;
                    i += 3;
                    continue;
                }
            }
            Tok::Ident(word) if word == "use" => {
                let end = toks[i..]
                    .iter()
                    .position(|t| *t == Tok::Semi)
                    .map_or(toks.len(), |p| i + p);
                let mut back = i;
                while back > 0
                    && matches!(&toks[back - 1], Tok::Other | Tok::PathSep | Tok::Ident(_))
                    && !matches!(&toks[back - 1], Tok::Ident(w) if w == "pub")
                    && i - back < 6
                {
                    back -= 1;
                }
                let is_pub = back > 0 && toks[back - 1] == Tok::Ident("pub".into());
                let mut paths = Vec::new();
                let mut at = i + 1;
                use_tree(&toks[..end], &mut at, Vec::new(), &mut paths);
                for (path, bound) in paths {
                    named.push(Named {
                        from: here(),
                        path,
                        bound,
                        is_use: true,
                        is_pub,
                    });
                }
                i = end + 1;
                continue;
            }
            Tok::Ident(head)
                if toks.get(i + 1) == Some(&Tok::PathSep)
                    && (i == 0 || toks[i - 1] != Tok::PathSep) =>
            {
                let mut path = vec![head.clone()];
                let mut at = i + 1;
                while toks.get(at) == Some(&Tok::PathSep) {
                    match toks.get(at + 1) {
                        Some(Tok::Ident(seg)) => path.push(seg.clone()),
                        _ => break,
                    }
                    at += 2;
                }
                named.push(Named {
                    from: here(),
                    path,
                    bound: None,
                    is_use: false,
                    is_pub: false,
                });
                i = at;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    SourceFile {
        rel: rel.to_owned(),
        module,
        facade,
        named,
        inline,
    }
}

/// The files of a crate and what each imports from the others.
struct ImportGraph {
    files: Vec<SourceFile>,
    /// (importer, imported) → the first path that makes the edge.
    edges: std::collections::BTreeMap<(usize, usize), String>,
}

impl ImportGraph {
    /// `sources` are (path under `src/`, text) pairs.
    fn new(sources: &[(String, String)]) -> Self {
        let files: Vec<SourceFile> = sources
            .iter()
            .map(|(rel, text)| source_file(rel, text))
            .collect();
        let mut graph = ImportGraph {
            files,
            edges: Default::default(),
        };
        for f in 0..graph.files.len() {
            for named in &graph.files[f].named {
                let Some(target) = graph.resolve(&named.from, &named.path, 0) else {
                    continue;
                };
                let own_subtree = graph.files[target]
                    .module
                    .starts_with(&graph.files[f].module);
                if target == f || (named.is_pub && graph.files[f].facade && own_subtree) {
                    continue;
                }
                graph
                    .edges
                    .entry((f, target))
                    .or_insert_with(|| named.path.join("::"));
            }
        }
        graph
    }

    fn file_of(&self, module: &[String]) -> Option<usize> {
        self.files.iter().position(|f| f.module == module)
    }

    /// The file that defines what `path`, named from module `from`, points at; `None` for
    /// a path outside the crate.
    fn resolve(&self, from: &[String], path: &[String], hops: u32) -> Option<usize> {
        let head = path.first()?;
        let mut module = from.to_vec();
        let mut rest = path;
        if head == "crate" {
            module.clear();
            rest = &path[1..];
        } else if head != "super" && head != "self" {
            // A relative path: only into a child module (anything else names another crate
            // or a local item).
            let mut child = from.to_vec();
            child.push(head.clone());
            let is_child = self.file_of(&child).is_some()
                || self.files.iter().any(|f| f.inline.contains(&child));
            if !is_child {
                return None;
            }
        }
        while let Some(seg) = rest.first() {
            match seg.as_str() {
                "super" => {
                    module.pop()?;
                }
                "self" => {}
                _ => break,
            }
            rest = &rest[1..];
        }
        // From an inline module, back to the file that holds it.
        let mut pending = Vec::new();
        while self.file_of(&module).is_none() {
            pending.insert(0, module.pop()?);
        }
        let mut rest: Vec<String> = pending.into_iter().chain(rest.iter().cloned()).collect();
        while let Some(seg) = rest.first() {
            let mut child = module.clone();
            child.push(seg.clone());
            if self.file_of(&child).is_none() {
                break;
            }
            module = child;
            rest.remove(0);
        }
        let file = self.file_of(&module)?;
        if let (Some(name), true) = (rest.first(), self.files[file].facade) {
            let export = self.files[file]
                .named
                .iter()
                .find(|n| n.is_use && n.bound.as_ref() == Some(name));
            if let Some(export) = export.filter(|_| hops < 8) {
                return self
                    .resolve(&export.from, &export.path, hops + 1)
                    .or(Some(file));
            }
        }
        Some(file)
    }

    /// The groups of two or more files that import each other: each its files and its
    /// edges in words (`a.rs -> b.rs (the path)`).
    fn circles(&self) -> Vec<(Vec<String>, Vec<String>)> {
        let n = self.files.len();
        let mut reach = vec![vec![false; n]; n];
        for (from, row) in reach.iter_mut().enumerate() {
            let mut stack = vec![from];
            while let Some(at) = stack.pop() {
                for &(a, b) in self.edges.keys() {
                    if a == at && !row[b] {
                        row[b] = true;
                        stack.push(b);
                    }
                }
            }
        }
        let mut seen = vec![false; n];
        let mut circles = Vec::new();
        for a in 0..n {
            if seen[a] || !reach[a][a] {
                continue;
            }
            let group: Vec<usize> = (0..n).filter(|&b| reach[a][b] && reach[b][a]).collect();
            for &b in &group {
                seen[b] = true;
            }
            let edges: Vec<String> = self
                .edges
                .iter()
                .filter(|((x, y), _)| group.contains(x) && group.contains(y))
                .map(|((x, y), path)| {
                    format!("{} -> {} ({path})", self.files[*x].rel, self.files[*y].rel)
                })
                .collect();
            let files = group.iter().map(|&f| self.files[f].rel.clone()).collect();
            circles.push((files, edges));
        }
        circles
    }
}

/// Folders (under `crates/anarchon-core/src/`) whose files may import each other for now,
/// with why: a circle whose files all lie in one of them is reported by the test's name
/// only when the exception is stale.
const CIRCLES_FOR_NOW: [(&str, &str); 0] = [];

#[test]
fn anarchon_core_files_import_each_other_in_one_direction() {
    let src = project_root().join("crates/anarchon-core/src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    paths.sort();
    let sources: Vec<(String, String)> = paths
        .iter()
        .map(|path| {
            (
                relative(&src, path),
                std::fs::read_to_string(path).unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        sources.iter().any(|(rel, _)| rel == "lib.rs"),
        "no lib.rs under {}",
        src.display()
    );
    let graph = ImportGraph::new(&sources);
    assert!(
        graph.edges.len() > sources.len(),
        "the import graph has only {} edges for {} files: the reader misses imports",
        graph.edges.len(),
        sources.len()
    );
    let mut circles = graph.circles();
    for (folder, why) in CIRCLES_FOR_NOW {
        let inside = |file: &String| file.starts_with(folder);
        assert!(
            circles.iter().any(|(files, _)| files.iter().any(inside)),
            "no circle reaches into {folder} any more ({why}): remove it from CIRCLES_FOR_NOW \
             in xtask/src/tidy.rs"
        );
        let excused = |(files, _): &(Vec<String>, Vec<String>)| files.iter().all(inside);
        circles.retain(|circle| !excused(circle));
    }
    let circles: Vec<String> = circles
        .into_iter()
        .map(|(_, edges)| edges.join(", "))
        .collect();
    assert!(
        circles.is_empty(),
        "files of anarchon-core's src/ import each other (move the shared item down to the \
         more basic file and re-export it):\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_import_check_finds_circles_through_re_exports_and_paths() {
    let files = |list: &[(&str, &str)]| -> Vec<(String, String)> {
        list.iter()
            .map(|(rel, text)| (rel.to_string(), text.to_string()))
            .collect()
    };
    // b imports a's item through lib.rs's re-export; a names b's item in a path.
    let circle = ImportGraph::new(&files(&[
        ("lib.rs", "//! x\nmod a;\nmod b;\npub use a::Thing;\n"),
        (
            "a.rs",
            "//! a\npub struct Thing;\nfn f() { crate::b::g(); }\n",
        ),
        (
            "b.rs",
            "//! b\nuse crate::{Thing, other::X};\npub fn g() {}\n",
        ),
    ]));
    assert_eq!(circle.circles().len(), 1, "{:?}", circle.edges);
    // A mod.rs that uses its child's item for itself (a private `use`) and defines what the
    // child imports: the old scheduler/mod.rs <-> driver.rs circle.
    let parent = ImportGraph::new(&files(&[
        ("lib.rs", "//! x\nmod s;\n"),
        (
            "s/mod.rs",
            "//! s\nmod driver;\nuse driver::run;\npub struct Shared;\n",
        ),
        (
            "s/driver.rs",
            "//! d\nuse super::Shared;\npub fn run() {}\n",
        ),
    ]));
    assert_eq!(parent.circles().len(), 1, "{:?}", parent.edges);
    // A child reaches a sibling through its parent's re-export, and the parent calls the
    // child: no circle between files (the items live in the siblings).
    let fine = ImportGraph::new(&files(&[
        ("lib.rs", "//! x\nmod s;\n"),
        (
            "s/mod.rs",
            "//! s\nmod handle;\nmod driver;\nmod shared;\npub(crate) use shared::{Shared, ended};\npub use handle::Handle;\n",
        ),
        (
            "s/handle.rs",
            "//! h\nuse super::driver;\nuse super::shared::Shared;\npub struct Handle;\nfn go() { driver::run(); }\n",
        ),
        (
            "s/driver.rs",
            "//! d\nuse super::{Shared};\npub fn run() { super::ended(); }\n#[cfg(test)]\nmod tests { use super::super::Handle; }\n",
        ),
        (
            "s/shared.rs",
            "//! s\npub struct Shared;\npub fn ended() {}\nmod inner { fn f() { super::ended(); } }\n",
        ),
    ]));
    assert!(fine.circles().is_empty(), "{:?}", fine.circles());
    assert_eq!(
        fine.edges.len(),
        3,
        "handle->driver, handle->shared, driver->shared: {:?}",
        fine.edges
    );
}
