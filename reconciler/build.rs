//! Names the commit gridctl is built from, for `gridctl --version`
//! (`gridctl 0.1.0 (abc1234)`): `GRID_COMMIT` is the short hash of HEAD, or `unknown` outside a git checkout (a source
//! tarball) or without git.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?;
    Some(text.trim().to_owned()).filter(|t| !t.is_empty())
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let commit = git(&["rev-parse", "--short=7", "HEAD"]);
    // Rebuild when HEAD moves: HEAD itself (a checkout), the branch it names (a commit)
    // and packed refs. Worktrees keep HEAD in their own git dir, refs in the common one.
    if let (Some(git_dir), Some(common)) = (
        git(&["rev-parse", "--absolute-git-dir"]),
        git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]),
    ) {
        // Only files that exist: cargo takes a missing one as changed on every build,
        // which rebuilt gridctl each time in a clone without packed refs.
        let mut watched = vec![format!("{git_dir}/HEAD"), format!("{common}/packed-refs")];
        if let Some(reference) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watched.push(format!("{common}/{reference}"));
        }
        for path in watched.iter().filter(|p| std::path::Path::new(p).exists()) {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    let version = match commit {
        Some(hash) => hash,
        None => "unknown".to_owned(),
    };
    println!("cargo:rustc-env=GRID_COMMIT={version}");
}
