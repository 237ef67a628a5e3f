//! Wall time of the simulator on the full CTC-SP2 trace (77,222 records, 338 processors),
//! per policy. Target (issue 2): gang, MPL 4, alternates on, under 1 second.
//! The trace is read once, outside the measurement; COSCHED_TRACES names the traces folder
//! (default: ../shared/traces beside the checkout).

use cosched_sim::*;
use criterion::{criterion_group, criterion_main, Criterion};
use std::path::PathBuf;
use std::time::Duration;

fn ctc() -> (Vec<SimJob>, Dropped) {
    let dir = std::env::var_os("COSCHED_TRACES")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces")
        });
    let path = dir.join("CTC-SP2-1996-3.1-cln.swf.gz");
    let trace = swf::read_path(&path)
        .unwrap_or_else(|e| panic!("{e} (set COSCHED_TRACES to the traces folder)"));
    jobs_from_trace(&trace)
}

fn replay(c: &mut Criterion) {
    let (jobs, dropped) = ctc();
    let mut group = c.benchmark_group("ctc-sp2");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(8));
    let mut gang_mpl4 = SimConfig::new(338, Policy::Gang);
    gang_mpl4.mpl = 4;
    let mut gang_mpl4_no_alt = gang_mpl4.clone();
    gang_mpl4_no_alt.alternates = false;
    let mut gang_mpl8 = gang_mpl4.clone();
    gang_mpl8.mpl = 8;
    for (name, config) in [
        ("fcfs", SimConfig::new(338, Policy::Fcfs)),
        ("easy", SimConfig::new(338, Policy::Easy)),
        ("gang-mpl4", gang_mpl4),
        ("gang-mpl4-no-alternates", gang_mpl4_no_alt),
        ("gang-mpl8", gang_mpl8),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| simulate(&jobs, dropped, &config, &mut |_, _| {}).unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, replay);
criterion_main!(benches);
