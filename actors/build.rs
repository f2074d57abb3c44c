//! Sets `STRATA_GIT_REVISION` (the short commit hash, `+dirty` left out) for the build-info
//! metric. Never fails: outside a git checkout, or without `git`, the revision is left unset and
//! the binary reports `unknown`. `STRATA_GIT_REVISION` in the environment wins (for packagers).

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=STRATA_GIT_REVISION");
    if let Ok(rev) = std::env::var("STRATA_GIT_REVISION") {
        println!("cargo:rustc-env=STRATA_GIT_REVISION={rev}");
        return;
    }
    let git_dir = Path::new("../.git");
    if git_dir.is_dir() {
        // Rebuild when HEAD moves: HEAD itself, the branch it names, and packed refs.
        println!("cargo:rerun-if-changed=../.git/HEAD");
        if let Ok(head) = std::fs::read_to_string(git_dir.join("HEAD")) {
            if let Some(r) = head.trim().strip_prefix("ref: ") {
                let path = git_dir.join(r);
                if path.exists() {
                    println!("cargo:rerun-if-changed={}", path.display());
                }
            }
        }
        if git_dir.join("packed-refs").exists() {
            println!("cargo:rerun-if-changed=../.git/packed-refs");
        }
    }
    let out = Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).output();
    if let Ok(o) = out {
        let rev = String::from_utf8_lossy(&o.stdout).trim().to_string();
        if o.status.success() && !rev.is_empty() && rev.bytes().all(|b| b.is_ascii_hexdigit()) {
            println!("cargo:rustc-env=STRATA_GIT_REVISION={rev}");
        }
    }
}
