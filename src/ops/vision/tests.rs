//! Unit tests of the vision operators against hand-computed values, the ONNX
//! specification examples and identities (an identity affine grid samples
//! the input back exactly).

use crate::ir::attributes::Attribute;
use crate::ops::shape::test_util::*;
use crate::tensor::Tensor;

fn int(v: i64) -> Attribute {
    Attribute::Int(v)
}

fn grid_sample(x: &Tensor, g: &Tensor, opset: i64, attrs: &[(&str, Attribute)]) -> Tensor {
    run1("GridSample", opset, attrs, &[x.clone(), g.clone()])
}

fn affine_grid(theta: &Tensor, size: &[i64], align: i64) -> Tensor {
    run1(
        "AffineGrid",
        20,
        &[("align_corners", int(align))],
        &[theta.clone(), i64s(size)],
    )
}

#[test]
fn affine_grid_identity_lists_pixel_centres() {
    let theta = t(&[1, 2, 3], vec![1.0f32, 0.0, 0.0, 0.0, 1.0, 0.0]);
    let g = affine_grid(&theta, &[1, 1, 2, 3], 0);
    let (a, b) = (2.0f32 / 3.0, 0.5f32);
    let want = t(
        &[1, 2, 3, 2],
        vec![-a, -b, 0.0, -b, a, -b, -a, b, 0.0, b, a, b],
    );
    assert_close(&g, &want, 1e-6);
    let g = affine_grid(&theta, &[1, 1, 2, 3], 1);
    let want = t(
        &[1, 2, 3, 2],
        vec![
            -1.0f32, -1.0, 0.0, -1.0, 1.0, -1.0, -1.0, 1.0, 0.0, 1.0, 1.0, 1.0,
        ],
    );
    assert_close(&g, &want, 1e-6);
    // A scale of 2 and a shift of 0.5 along x.
    let theta = t(&[1, 2, 3], vec![2.0f32, 0.0, 0.5, 0.0, 1.0, 0.0]);
    let g = affine_grid(&theta, &[1, 1, 1, 2], 1);
    assert_close(&g, &t(&[1, 1, 2, 2], vec![-1.5f32, 0.0, 2.5, 0.0]), 1e-6);
}

#[test]
fn affine_grid_3d_and_shape_errors() {
    let mut id = vec![0.0f64; 12];
    for k in 0..3 {
        id[k * 4 + k] = 1.0;
    }
    let theta = t(&[1, 3, 4], id);
    let g = affine_grid(&theta, &[1, 1, 2, 1, 3], 1);
    assert_eq!(g.shape(), &[1, 2, 1, 3, 3]);
    let v = g.to_f64_vec().unwrap();
    // Point (d=1, h=0, w=2): x = 1, y = 0 (one row), z = 1.
    assert_eq!(&v[15..18], &[1.0, 0.0, 1.0]);
    let bad = fails("AffineGrid", 20, &[], &[theta.clone(), i64s(&[1, 1, 2, 3])]);
    assert!(bad.contains("does not match"), "{bad}");
    let neg = fails("AffineGrid", 20, &[], &[theta, i64s(&[1, 1, -2, 1, 3])]);
    assert!(neg.contains("negative"), "{neg}");
}

#[test]
fn identity_grid_reproduces_the_input() {
    let x = t(
        &[2, 3, 3, 4],
        (0..72).map(|v| ((v * 37) % 11) as f32 - 5.0).collect(),
    );
    let theta = t(&[2, 2, 3], [1.0f32, 0.0, 0.0, 0.0, 1.0, 0.0].repeat(2));
    for align in [0, 1] {
        let g = affine_grid(&theta, &[2, 3, 3, 4], align);
        for (opset, mode) in [
            (16, "bilinear"),
            (16, "nearest"),
            (20, "linear"),
            (20, "cubic"),
        ] {
            for pad in ["zeros", "border", "reflection"] {
                let attrs = [
                    ("mode", s(mode)),
                    ("padding_mode", s(pad)),
                    ("align_corners", int(align)),
                ];
                let y = grid_sample(&x, &g, opset, &attrs);
                assert_close(&y, &x, 1e-5);
            }
        }
    }
}

#[test]
fn volumetric_identity_grid() {
    let x = t(&[1, 2, 2, 3, 2], (0..24).map(|v| v as f64).collect());
    let mut id = vec![0.0f64; 12];
    for k in 0..3 {
        id[k * 4 + k] = 1.0;
    }
    let g = affine_grid(&t(&[1, 3, 4], id), &[1, 2, 2, 3, 2], 0);
    for mode in ["linear", "nearest"] {
        let y = grid_sample(&x, &g, 20, &[("mode", s(mode))]);
        assert_close(&y, &x, 1e-12);
    }
}

/// Samples the row [1, 2, 3] (1-D spatial, opset 20) at normalized positions.
fn sample_row(g: &[f32], mode: &str, pad: &str, align: i64) -> Vec<f64> {
    let x = t(&[1, 1, 3], vec![1.0f32, 2.0, 3.0]);
    let grid = t(&[1, g.len(), 1], g.to_vec());
    let attrs = [
        ("mode", s(mode)),
        ("padding_mode", s(pad)),
        ("align_corners", int(align)),
    ];
    grid_sample(&x, &grid, 20, &attrs).to_f64_vec().unwrap()
}

#[test]
fn padding_modes_outside_the_input() {
    // align_corners = 1: g = -1, 0, 0.5, 2 are pixels 0, 1, 1.5, 3.
    let g = [-1.0, 0.0, 0.5, 2.0];
    assert_eq!(sample_row(&g, "linear", "zeros", 1), [1.0, 2.0, 2.5, 0.0]);
    assert_eq!(sample_row(&g, "linear", "border", 1), [1.0, 2.0, 2.5, 3.0]);
    // Pixel 3 reflects about pixel 2 onto pixel 1.
    assert_eq!(
        sample_row(&g, "linear", "reflection", 1),
        [1.0, 2.0, 2.5, 2.0]
    );
    // Nearest rounds half to even: 1.5 -> 2.
    assert_eq!(sample_row(&g, "nearest", "zeros", 1), [1.0, 2.0, 3.0, 0.0]);
    // align_corners = 0: g = -1 is pixel -0.5, half of it outside.
    assert_eq!(sample_row(&[-1.0], "linear", "zeros", 0), [0.5]);
    assert_eq!(sample_row(&[-1.0], "linear", "border", 0), [1.0]);
}

#[test]
fn cubic_uses_keys_weights() {
    let x = t(&[1, 1, 8], (0..8).map(|v| v as f64 * 2.0).collect());
    // Pixels 2.25 and 4.5 (align_corners = 1: pixel = (g + 1) / 2 * 7).
    let grid = t(
        &[1, 2, 1],
        vec![2.0 * 2.25 / 7.0 - 1.0, 2.0 * 4.5 / 7.0 - 1.0],
    );
    let attrs = [("mode", s("cubic")), ("align_corners", int(1))];
    let y = grid_sample(&x, &grid, 20, &attrs);
    // Keys' weights (A = -0.75) at fraction 0.25 for pixels 1..=4 (values
    // 2, 4, 6, 8); at a half pixel they are symmetric and give the midpoint.
    let w = [-0.10546875, 0.87890625, 0.26171875, -0.03515625];
    let at_quarter: f64 = w.iter().zip([2.0, 4.0, 6.0, 8.0]).map(|(a, b)| a * b).sum();
    assert_close(&y, &t(&[1, 1, 2], vec![at_quarter, 9.0]), 1e-12);
}

#[test]
fn grid_sample_rejects_bad_shapes() {
    let x = t(&[1, 1, 3], vec![1.0f32, 2.0, 3.0]);
    let g = t(&[1, 2, 1], vec![0.0f32, 0.5]);
    let e = fails("GridSample", 16, &[], &[x.clone(), g.clone()]);
    assert!(e.contains("rank 4"), "{e}");
    let g2 = t(&[1, 2, 2], vec![0.0f32; 4]);
    let e = fails("GridSample", 20, &[], &[x, g2]);
    assert!(e.contains("does not match"), "{e}");
}

fn nms(boxes: Vec<f32>, scores: Vec<f32>, extra: &[Tensor], center: i64) -> Tensor {
    let n = boxes.len() / 4;
    let mut ins = vec![t(&[1, n, 4], boxes), t(&[1, 1, n], scores)];
    ins.extend_from_slice(extra);
    run1(
        "NonMaxSuppression",
        11,
        &[("center_point_box", int(center))],
        &ins,
    )
}

fn limits(max: i64, iou: f32, score: f32) -> Vec<Tensor> {
    vec![i64s(&[max]), f32s(&[iou]), f32s(&[score])]
}

#[test]
fn nms_spec_examples() {
    let boxes = vec![
        0.0f32, 0.0, 1.0, 1.0, 0.0, 0.1, 1.0, 1.1, 0.0, -0.1, 1.0, 0.9, 0.0, 10.0, 1.0, 11.0, 0.0,
        10.1, 1.0, 11.1, 0.0, 100.0, 1.0, 101.0,
    ];
    let scores = vec![0.9f32, 0.75, 0.6, 0.95, 0.5, 0.3];
    let y = nms(boxes.clone(), scores.clone(), &limits(3, 0.5, 0.0), 0);
    assert_eq!(y, t(&[3, 3], vec![0i64, 0, 3, 0, 0, 0, 0, 0, 5]));
    let y = nms(boxes.clone(), scores.clone(), &limits(3, 0.5, 0.4), 0);
    assert_eq!(y, t(&[2, 3], vec![0i64, 0, 3, 0, 0, 0]));
    let y = nms(boxes.clone(), scores.clone(), &limits(2, 0.5, 0.0), 0);
    assert_eq!(y, t(&[2, 3], vec![0i64, 0, 3, 0, 0, 0]));
    // Without max_output_boxes_per_class nothing is selected.
    let y = nms(boxes.clone(), scores.clone(), &[], 0);
    assert_eq!(y.shape(), &[0, 3]);
    // The same boxes as centres and sizes.
    let centred: Vec<f32> = boxes
        .chunks(4)
        .flat_map(|b| [(b[1] + b[3]) / 2.0, (b[0] + b[2]) / 2.0, 1.0, 1.0])
        .collect();
    let y = nms(centred, scores, &limits(3, 0.5, 0.0), 1);
    assert_eq!(y, t(&[3, 3], vec![0i64, 0, 3, 0, 0, 0, 0, 0, 5]));
}

#[test]
fn nms_ties_and_errors() {
    // Identical boxes and scores: only the first survives.
    let y = nms(
        [0.0f32, 0.0, 1.0, 1.0].repeat(4),
        vec![0.9; 4],
        &limits(3, 0.5, 0.0),
        0,
    );
    assert_eq!(y, t(&[1, 3], vec![0i64, 0, 0]));
    let e = fails(
        "NonMaxSuppression",
        11,
        &[],
        &[
            t(&[1, 2, 4], vec![0.0f32; 8]),
            t(&[1, 1, 3], vec![0.0f32; 3]),
        ],
    );
    assert!(e.contains("do not match"), "{e}");
}

fn roi_align(x: &Tensor, rois: Vec<f32>, attrs: &[(&str, Attribute)]) -> Tensor {
    let r = rois.len() / 4;
    let ins = [x.clone(), t(&[r, 4], rois), i64s(&vec![0; r])];
    run1("RoiAlign", 16, attrs, &ins)
}

#[test]
fn roi_align_on_a_ramp() {
    // X[y][x] = x on a 10 x 10 image: a bin's average is its samples' mean x.
    let x = t(&[1, 1, 10, 10], (0..100).map(|v| (v % 10) as f32).collect());
    let base = [
        ("output_height", int(2)),
        ("output_width", int(2)),
        ("sampling_ratio", int(2)),
    ];
    let mut attrs = base.to_vec();
    attrs.push(("coordinate_transformation_mode", s("output_half_pixel")));
    let y = roi_align(&x, vec![2.0, 2.0, 6.0, 6.0], &attrs);
    assert_close(&y, &t(&[1, 1, 2, 2], vec![3.0f32, 5.0, 3.0, 5.0]), 1e-6);
    let y = roi_align(&x, vec![2.0, 2.0, 6.0, 6.0], &base);
    assert_close(&y, &t(&[1, 1, 2, 2], vec![2.5f32, 4.5, 2.5, 4.5]), 1e-6);
    // Samples on whole pixels read single pixels, for max as for avg.
    let x = t(&[1, 1, 4, 4], (0..16).map(|v| v as f32).collect());
    for mode in ["avg", "max"] {
        let attrs = [
            ("output_height", int(2)),
            ("output_width", int(2)),
            ("sampling_ratio", int(1)),
            ("mode", s(mode)),
            ("coordinate_transformation_mode", s("output_half_pixel")),
        ];
        let y = roi_align(&x, vec![0.0, 0.0, 4.0, 4.0], &attrs);
        assert_close(&y, &t(&[1, 1, 2, 2], vec![5.0f32, 7.0, 13.0, 15.0]), 1e-6);
    }
}

#[test]
fn roi_align_rejects_bad_batch_index() {
    let x = t(&[1, 1, 2, 2], vec![1.0f32; 4]);
    let ins = [x, t(&[1, 4], vec![0.0f32, 0.0, 1.0, 1.0]), i64s(&[1])];
    let e = fails("RoiAlign", 16, &[], &ins);
    assert!(e.contains("out of range"), "{e}");
}

#[test]
fn hostile_values_give_results_or_errors_not_panics() {
    let x = t(&[1, 1, 2, 2], vec![1.0f32, 2.0, 3.0, 4.0]);
    let odd = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1e30, -1e30, 0.0];
    let g = t(&[1, 3, 1, 2], odd.to_vec());
    for mode in ["linear", "nearest", "cubic"] {
        for pad in ["zeros", "border", "reflection"] {
            for align in [0, 1] {
                let attrs = [
                    ("mode", s(mode)),
                    ("padding_mode", s(pad)),
                    ("align_corners", int(align)),
                ];
                let y = grid_sample(&x, &g, 20, &attrs);
                assert_eq!(y.shape(), &[1, 1, 3, 1]);
            }
        }
    }
    // An empty spatial axis samples zeros.
    let empty = t(&[1, 1, 0, 2], Vec::<f32>::new());
    let y = grid_sample(&empty, &t(&[1, 1, 1, 2], vec![0.0f32, 0.0]), 20, &[]);
    assert_eq!(y.to_f64_vec().unwrap(), [0.0]);
    // Regions with NaN or huge coordinates.
    let rois = vec![f32::NAN, 0.0, 1.0, 1.0, 0.0, 0.0, 1e30, 1e30];
    let ins = [x.clone(), t(&[2, 4], rois), i64s(&[0, 0])];
    let e = fails("RoiAlign", 16, &[], &ins);
    assert!(e.contains("samples per bin"), "{e}");
    let ins = [x, t(&[1, 4], vec![f32::NAN; 4]), i64s(&[0])];
    run1("RoiAlign", 16, &[], &ins);
    // NaN scores sort without panicking.
    let y = nms(
        [0.0f32, 0.0, 1.0, 1.0].repeat(2),
        vec![f32::NAN, 0.5],
        &limits(5, 0.5, 0.0),
        0,
    );
    assert_eq!(y.shape()[1], 3);
}
