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
