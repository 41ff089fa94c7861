//! Builds the C programs `tests/c/test_ramify.c`, `tests/c/soak_ramify.c` and
//! `tests/c/unload_ramify.c` against `include/ramify.h` and the static
//! library, then runs them: on the tiny model of `tests/common/model.rs` (two
//! threads on one session, every error path), on the example model
//! `models/inception_mini.onnx` against its reference output, the soak (eight
//! threads on one session under changing load, every output against a serial
//! run), the unload check (the shared library opened with dlopen, sessions
//! created and destroyed, no thread left, dlclose), the binding program
//! (tensors shared without a copy, chosen outputs, caller buffers, metadata,
//! dimension names, CPU limit and set), the run-options program
//! `tests/c/options_ramify.c` (deadline, time limit, cancellation from
//! another thread, the event callback, on the example model), and each under
//! valgrind. The examples in `examples/` that the README shows are compiled
//! and run too.
//!
//! The C compiler is `$CC` or `cc`. valgrind must be installed
//! (`scripts/test.sh` installs it) unless `RAMIFY_SKIP_VALGRIND=1`.

#[path = "common/model.rs"]
mod model;

use onnx_protobuf::{Message, TensorProto};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn work_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ramify-ffi-c");
    std::fs::create_dir_all(&dir).expect("the test's scratch folder");
    dir
}

/// target/<profile>/: the test executable lives in its deps/ folder.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("the test executable is in target/<profile>/deps")
        .to_path_buf()
}

/// libramify_ffi.a. cargo test compiles the library for the tests in one
/// rustc run with all its crate types, leaving the staticlib (fresh, from the
/// same sources) in target/<profile>/deps/ without copying it up; when it is
/// not there, it is built with `cargo build -p ramify-ffi`.
fn static_library() -> PathBuf {
    let dir = profile_dir();
    let fresh = dir.join("deps/libramify_ffi.a");
    if fresh.exists() {
        return fresh;
    }
    let profile = match dir.file_name().and_then(|n| n.to_str()) {
        Some("release") => "release",
        // cargo test builds the library a test links with the dev profile:
        // the same profile reuses those artifacts instead of rebuilding.
        _ => "dev",
    };
    let status = Command::new(env!("CARGO"))
        .args(["build", "--lib", "-p", "ramify-ffi", "--profile", profile])
        .arg("--manifest-path")
        .arg(crate_dir().join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", dir.parent().expect("target/"))
        .status()
        .expect("cargo runs");
    assert!(status.success(), "cargo build -p ramify-ffi failed");
    let lib = dir.join("libramify_ffi.a");
    assert!(lib.exists(), "{} was not built", lib.display());
    lib
}

/// libramify_ffi.so, from the same build as the static library.
fn shared_library() -> PathBuf {
    let lib = static_library();
    let so = lib.with_file_name("libramify_ffi.so");
    assert!(
        so.exists(),
        "{} was not built beside {}",
        so.display(),
        lib.display()
    );
    so
}

/// The compiled C program `tests/c/<name>.c` (built once per test run).
fn program(name: &'static str) -> PathBuf {
    compiled(name, &format!("tests/c/{name}.c"))
}

/// The C file `source` (relative to the crate) compiled as `name`, once.
fn compiled(name: &'static str, source: &str) -> PathBuf {
    static PROGRAMS: OnceLock<std::sync::Mutex<Vec<(&'static str, PathBuf)>>> = OnceLock::new();
    let mut built = PROGRAMS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some((_, exe)) = built.iter().find(|(n, _)| *n == name) {
        return exe.clone();
    }
    let lib = static_library();
    let exe = work_dir().join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let out = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-g", "-O1"])
        .arg("-I")
        .arg(crate_dir().join("include"))
        .arg(crate_dir().join(source))
        .arg(&lib)
        .args(["-lpthread", "-ldl", "-lm"])
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler {cc:?}: {e}"));
    assert!(
        out.status.success(),
        "compiling {name}.c failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    built.push((name, exe.clone()));
    exe
}

/// The three-headed model of `tests/common/model.rs` as a file, one per test.
fn three_heads_model(test: &str) -> PathBuf {
    let path = work_dir().join(format!("three_heads_{test}.onnx"));
    std::fs::write(&path, model::three_heads_bytes()).expect("writing the model");
    path
}

/// The tiny model as a file, one per test (tests run at the same time).
fn tiny_model(test: &str) -> PathBuf {
    let path = work_dir().join(format!("matmul_add_{test}.onnx"));
    std::fs::write(&path, model::matmul_add_bytes()).expect("writing the tiny model");
    path
}

fn check(what: &str, out: Output) {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{text}",
        out.status
    );
}

/// A TensorProto file's floats, as raw native-endian bytes for the C program.
fn raw_floats(pb: &Path, to: &Path) {
    let bytes = std::fs::read(pb).unwrap_or_else(|e| panic!("{}: {e}", pb.display()));
    let t = TensorProto::parse_from_bytes(&bytes).expect("a TensorProto");
    assert_eq!(t.data_type, 1, "{} holds floats", pb.display());
    let floats: Vec<f32> = if t.raw_data.is_empty() {
        t.float_data.clone()
    } else {
        t.raw_data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    let raw: Vec<u8> = floats.iter().flat_map(|v| v.to_ne_bytes()).collect();
    std::fs::write(to, raw).expect("writing reference data");
}

#[test]
fn c_program_runs_the_tiny_model_from_two_threads_and_checks_errors() {
    let out = Command::new(program("test_ramify"))
        .arg(tiny_model("tiny"))
        .output()
        .unwrap();
    check("test_ramify on the tiny model", out);
}

/// The example model's reference input and output as raw floats, one pair
/// of files per test (tests run at the same time).
fn example_reference(test: &str) -> (PathBuf, PathBuf) {
    let repo = crate_dir().parent().expect("the repository root");
    let data = repo.join("models/inception_mini/test_data_set_0");
    let dir = work_dir();
    let input = dir.join(format!("input_0_{test}.f32"));
    let expected = dir.join(format!("output_0_{test}.f32"));
    raw_floats(&data.join("input_0.pb"), &input);
    raw_floats(&data.join("output_0.pb"), &expected);
    (input, expected)
}

#[test]
fn c_program_runs_the_example_model() {
    let repo = crate_dir().parent().expect("the repository root");
    let (input, expected) = example_reference("example");
    let out = Command::new(program("test_ramify"))
        .arg(tiny_model("example"))
        .arg(repo.join("models/inception_mini.onnx"))
        .arg(&input)
        .arg(&expected)
        .output()
        .unwrap();
    check("test_ramify on models/inception_mini.onnx", out);
}

/// Whether valgrind can run; without it the valgrind tests fail unless
/// `RAMIFY_SKIP_VALGRIND=1` says to skip them.
fn valgrind_available() -> bool {
    let found = Command::new("valgrind").arg("--version").output();
    if found.as_ref().is_ok_and(|o| o.status.success()) {
        return true;
    }
    if std::env::var("RAMIFY_SKIP_VALGRIND").is_ok_and(|v| v == "1") {
        eprintln!("valgrind is not installed: skipped (RAMIFY_SKIP_VALGRIND=1)");
        return false;
    }
    panic!(
        "valgrind is not installed: the C API test runs its program under valgrind. \
         Install it (apt-get install valgrind; scripts/test.sh does) or set RAMIFY_SKIP_VALGRIND=1"
    );
}

#[test]
fn c_program_is_clean_under_valgrind() {
    if !valgrind_available() {
        return;
    }
    let out = valgrind()
        .arg(program("test_ramify"))
        .arg(tiny_model("valgrind"))
        .env("RAMIFY_TEST_ITERS", "3")
        .output()
        .unwrap();
    check("test_ramify under valgrind", out);
}

/// valgrind with the options every C test runs under: any error or definite
/// or indirect leak fails.
fn valgrind() -> Command {
    let mut c = Command::new("valgrind");
    c.args([
        "--error-exitcode=1",
        "--leak-check=full",
        "--errors-for-leak-kinds=definite,indirect",
        "--quiet",
    ]);
    c
}

fn example_model() -> PathBuf {
    crate_dir()
        .parent()
        .expect("the repository root")
        .join("models/inception_mini.onnx")
}

#[test]
fn c_soak_eight_threads_under_changing_load_agree_with_a_serial_run() {
    let out = Command::new(program("soak_ramify"))
        .arg(example_model())
        .args(["8", "40"])
        .output()
        .unwrap();
    check("soak_ramify", out);
}

#[test]
fn c_soak_is_clean_under_valgrind() {
    if !valgrind_available() {
        return;
    }
    let out = valgrind()
        .arg(program("soak_ramify"))
        .arg(example_model())
        .args(["8", "2"])
        .output()
        .unwrap();
    check("soak_ramify under valgrind", out);
}

#[test]
fn c_unload_leaves_no_thread_and_dlclose_succeeds() {
    let out = Command::new(program("unload_ramify"))
        .arg(shared_library())
        .arg(tiny_model("unload"))
        .output()
        .unwrap();
    check("unload_ramify", out);
}

#[test]
fn c_unload_is_clean_under_valgrind() {
    if !valgrind_available() {
        return;
    }
    let out = valgrind()
        .arg(program("unload_ramify"))
        .arg(shared_library())
        .arg(tiny_model("unload_valgrind"))
        .output()
        .unwrap();
    check("unload_ramify under valgrind", out);
}

#[test]
fn c_binding_shares_inputs_chooses_outputs_and_fills_buffers() {
    let out = Command::new(program("binding_ramify"))
        .arg(three_heads_model("binding"))
        .output()
        .unwrap();
    check("binding_ramify", out);
}

#[test]
fn c_binding_is_clean_under_valgrind() {
    if !valgrind_available() {
        return;
    }
    let out = valgrind()
        .arg(program("binding_ramify"))
        .arg(three_heads_model("binding_valgrind"))
        .output()
        .unwrap();
    check("binding_ramify under valgrind", out);
}

#[test]
fn c_run_options_stop_runs_and_deliver_events() {
    let (input, expected) = example_reference("options");
    let out = Command::new(program("options_ramify"))
        .arg(example_model())
        .arg(&input)
        .arg(&expected)
        .output()
        .unwrap();
    check("options_ramify", out);
}

#[test]
fn c_run_options_are_clean_under_valgrind() {
    if !valgrind_available() {
        return;
    }
    let (input, expected) = example_reference("options_valgrind");
    let out = valgrind()
        .arg(program("options_ramify"))
        .arg(example_model())
        .arg(&input)
        .arg(&expected)
        .output()
        .unwrap();
    check("options_ramify under valgrind", out);
}

/// The README's examples compile with the warnings an app would see and run
/// on the example model.
#[test]
fn c_examples_compile_and_run_on_the_example_model() {
    for (name, source, expect) in [
        ("run_model", "examples/run_model.c", "logits: [1, 100]"),
        ("camera_loop", "examples/camera_loop.c", "frame 3: class"),
    ] {
        let out = Command::new(compiled(name, source))
            .arg(example_model())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        check(name, out);
        assert!(text.contains(expect), "{name} printed:\n{text}");
    }
}
