//! The committed header `include/ramify.h` must be what cbindgen generates from
//! the crate today. Set `RAMIFY_BLESS_HEADER=1` to rewrite it instead.

use std::path::Path;

#[test]
fn header_is_up_to_date() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .expect("ffi/cbindgen.toml is readable and valid");
    let bindings = cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let generated = String::from_utf8(generated).expect("the header is UTF-8");
    let path = crate_dir.join("include/ramify.h");
    if std::env::var_os("RAMIFY_BLESS_HEADER").is_some_and(|v| v == "1") {
        std::fs::write(&path, &generated).expect("include/ramify.h is writable");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != generated {
        let line = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(generated.lines().count()));
        panic!(
            "ffi/include/ramify.h is out of date (first difference at line {}); \
             regenerate it with: RAMIFY_BLESS_HEADER=1 cargo test -p ramify-ffi --test header",
            line + 1
        );
    }
}
