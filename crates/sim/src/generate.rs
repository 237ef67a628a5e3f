//! Synthetic rigid-job workloads from the Lublin–Feitelson model (JPDC 2003), "all jobs"
//! parameters as published. Facts used: ../shared/notes/workload-models.md.

use crate::rng::Rng;
use crate::swf::{Header, Record, Trace};
use serde::Serialize;
use std::fmt::Write as _;

/// The model's parameters for one job population.
#[derive(Clone, Debug)]
pub struct Model {
    pub serial_prob: f64,
    pub pow2_prob: f64,
    pub u_low: f64,
    pub u_prob: f64,
    /// Run time: `exp(Gamma(a1, b1))` with probability `pa * size + pb`, else `exp(Gamma(a2, b2))`.
    pub a1: f64,
    pub b1: f64,
    pub a2: f64,
    pub b2: f64,
    pub pa: f64,
    pub pb: f64,
    /// Arrivals: `exp(Gamma(aarr * arar, barr))` points between jobs, spent through the day.
    pub aarr: f64,
    pub barr: f64,
    pub arar: f64,
    /// The daily cycle: the weight of each half hour is the mass of `Gamma(anum, bnum)` there.
    pub anum: f64,
    pub bnum: f64,
}

impl Model {
    /// The "all jobs" column of the published table.
    pub fn all_jobs() -> Model {
        Model {
            serial_prob: 0.244,
            pow2_prob: 0.576,
            u_low: 0.8,
            u_prob: 0.86,
            a1: 4.2,
            b1: 0.94,
            a2: 312.0,
            b2: 0.03,
            pa: -0.0054,
            pb: 0.78,
            aarr: 10.2303,
            barr: 0.4871,
            arar: 1.0225,
            anum: 8.1737,
            bnum: 3.9631,
        }
    }
}

const BUCKETS: usize = 48;
const BUCKET_SECONDS: f64 = 1800.0;
/// The model's day starts at half hour 11: buckets before it belong to the previous day's tail.
const CYCLIC_DAY_START: usize = 11;
/// Run times are truncated at exp(12) s (about 45 h), inter-arrival points at exp(13).
const TOO_MUCH_TIME: f64 = 12.0;
const TOO_MUCH_ARRIVAL: f64 = 13.0;

/// How a generated workload departs from the model as published (`Shape::published` keeps
/// it, and draws exactly the numbers it always drew).
#[derive(Clone, Debug)]
pub struct Shape {
    pub model: Model,
    /// Arrival rate multiplier: 2 halves every gap between arrivals, doubling the load.
    pub load_scale: f64,
    /// Size jobs as the model does for a machine of this many processors. The model scales
    /// sizes with the machine, so on 93,312 processors its median job asks thousands; the
    /// archive's wide machines run mostly small jobs (CEA-Curie: median 32).
    pub size_procs: Option<u32>,
    /// The chance that an arrival starts a burst: copies of its job (same size and run time)
    /// one second apart, as job arrays and parameter sweeps arrive in real logs.
    pub burst_prob: f64,
    /// Bursts hold 2 to this many jobs, log-uniformly (most are short, a few fill an hour).
    pub burst_most: u32,
    /// Only jobs of at most this many processors start bursts (arrays of small jobs).
    pub burst_largest: u32,
}

impl Shape {
    pub fn published(load_scale: f64) -> Shape {
        Shape {
            model: Model::all_jobs(),
            load_scale,
            size_procs: None,
            burst_prob: 0.0,
            burst_most: 1,
            burst_largest: 0,
        }
    }

    /// Shaped like CEA-Curie-2011 on its 93,312 processors (for 312,826 jobs): median job 32
    /// processors with about 54 % asking at most 32, a busiest hour of about 1,600
    /// submissions, an offered load near 0.6, hundreds of jobs running at once. The numbers
    /// below were fitted to those figures, which `curie_shape_has_the_logs_statistics` checks.
    pub fn curie() -> Shape {
        Shape {
            model: Model {
                // Whole nodes and powers of two, fewer serial jobs: the median asks 32.
                pow2_prob: 0.9,
                serial_prob: 0.2,
                // The model's short-run chance falls with size (large jobs run hours): the
                // work is then the large jobs', and at a load of 0.6 only tens of jobs run
                // at once. Rising with size instead (small jobs run hours, large ones
                // minutes) keeps hundreds running, thousands at the peaks.
                pa: 0.0054,
                pb: 0.22,
                ..Model::all_jobs()
            },
            load_scale: 47.0,
            size_procs: Some(14_000),
            burst_prob: 0.001,
            burst_most: 1_250,
            burst_largest: 32,
        }
    }
}

pub struct Generator {
    model: Model,
    procs: u32,
    /// The machine the sizes are drawn for (`Shape::size_procs`, else `procs`).
    size_procs: u32,
    burst_prob: f64,
    burst_most: u32,
    burst_largest: u32,
    /// Copies of the last job still to submit, one second apart.
    burst_left: u32,
    /// Processors and run time of the job a burst copies.
    last_job: (u32, i64),
    rng: Rng,
    /// Cost in points of one second in each half hour of the day; mean 1.
    weights: [f64; BUCKETS],
    load_scale: f64,
    now: f64,
}

impl Generator {
    pub fn new(procs: u32, seed: u64, shape: &Shape) -> Generator {
        assert!(
            procs > 0,
            "a workload needs a machine of at least one processor"
        );
        assert!(
            shape.load_scale.is_finite() && shape.load_scale > 0.0,
            "the load scale must be positive"
        );
        assert!(
            (0.0..1.0).contains(&shape.burst_prob) && shape.burst_most >= 1,
            "a burst chance in [0, 1) and bursts of at least one job"
        );
        let model = shape.model.clone();
        let weights = day_weights(model.anum, model.bnum);
        Generator {
            model,
            procs,
            size_procs: shape.size_procs.unwrap_or(procs).max(1),
            burst_prob: shape.burst_prob,
            burst_most: shape.burst_most,
            burst_largest: shape.burst_largest,
            burst_left: 0,
            last_job: (1, 1),
            rng: Rng::new(seed),
            weights,
            load_scale: shape.load_scale,
            now: 0.0,
        }
    }

    /// Log2 of the sizing machine and the middle of the two-stage uniform, scaled to it.
    fn size_bounds(&self) -> (f64, f64) {
        let high = f64::from(self.size_procs).log2();
        (high - 2.5, high)
    }

    fn size(&mut self) -> u32 {
        let m = &self.model;
        if self.size_procs == 1 || self.rng.uniform() < m.serial_prob {
            return 1;
        }
        let (med, high) = self.size_bounds();
        let low = m.u_low.min(med);
        let u = if self.rng.uniform() < m.u_prob {
            self.rng.between(low, med)
        } else {
            self.rng.between(med, high)
        };
        let size = if self.rng.uniform() < m.pow2_prob {
            2f64.powf(u.round())
        } else {
            2f64.powf(u).round()
        };
        (size as u32).clamp(1, self.procs)
    }

    fn run_time(&mut self, size: u32) -> i64 {
        let m = &self.model;
        let p = (m.pa * f64::from(size) + m.pb).clamp(0.0, 1.0);
        let (a, b) = if self.rng.uniform() < p {
            (m.a1, m.b1)
        } else {
            (m.a2, m.b2)
        };
        let log_time = self.rng.gamma(a, b).min(TOO_MUCH_TIME);
        (log_time.exp().round() as i64).max(1)
    }

    /// Advances the clock by one inter-arrival gap, paying each second's weight in points.
    fn arrive(&mut self) -> f64 {
        let m = &self.model;
        let mut points = self
            .rng
            .gamma(m.aarr * m.arar, m.barr)
            .min(TOO_MUCH_ARRIVAL)
            .exp()
            / self.load_scale;
        loop {
            let day_second = self.now.rem_euclid(86_400.0);
            let bucket = (day_second / BUCKET_SECONDS) as usize % BUCKETS;
            let left = BUCKET_SECONDS - day_second % BUCKET_SECONDS;
            let cost = self.weights[bucket] * left;
            if points <= cost {
                self.now += points / self.weights[bucket];
                return self.now;
            }
            points -= cost;
            self.now += left;
        }
    }

    /// Whether this arrival starts a burst, and how many copies follow it. No number is
    /// drawn without bursts, so the published shape keeps its workloads.
    fn burst(&mut self, size: u32) -> u32 {
        if size > self.burst_largest || self.rng.uniform() >= self.burst_prob {
            return 0;
        }
        let most = f64::from(self.burst_most.max(2));
        let jobs = (2f64.ln() + self.rng.uniform() * (most / 2.0).ln()).exp();
        (jobs.round() as u32).clamp(2, self.burst_most.max(2)) - 1
    }

    /// The next job as an SWF record numbered `number`.
    pub fn job(&mut self, number: u64) -> Record {
        let (submit, (size, run)) = if self.burst_left > 0 {
            self.burst_left -= 1;
            self.now += 1.0;
            (self.now, self.last_job)
        } else {
            let submit = self.arrive();
            let size = self.size();
            self.burst_left = self.burst(size);
            self.last_job = (size, self.run_time(size));
            (submit, self.last_job)
        };
        let mut record = Record::unknown();
        record.fields[0] = number as f64;
        record.fields[1] = submit.floor();
        record.fields[3] = run as f64;
        record.fields[4] = f64::from(size);
        record.fields[7] = f64::from(size);
        record.fields[10] = 1.0;
        record
    }
}

/// Half-hour weights of the daily cycle, normalised to mean 1 (so a point is about a second).
fn day_weights(shape: f64, scale: f64) -> [f64; BUCKETS] {
    // Unnormalised Gamma density; the constant cancels when normalising.
    let density = |x: f64| {
        if x <= 0.0 {
            0.0
        } else {
            ((shape - 1.0) * x.ln() - x / scale).exp()
        }
    };
    let mut weights = [0.0; BUCKETS];
    for (bucket, weight) in weights.iter_mut().enumerate() {
        // Buckets before the day's start sit at the end of the model's day.
        let x0 = if bucket >= CYCLIC_DAY_START {
            bucket
        } else {
            bucket + BUCKETS
        } as f64;
        // Simpson's rule over the half hour.
        let steps = 16;
        let h = 1.0 / steps as f64;
        let mut sum = density(x0) + density(x0 + 1.0);
        for i in 1..steps {
            let factor = if i % 2 == 1 { 4.0 } else { 2.0 };
            sum += factor * density(x0 + i as f64 * h);
        }
        *weight = sum * h / 3.0;
    }
    let mean = weights.iter().sum::<f64>() / BUCKETS as f64;
    for weight in &mut weights {
        // Never zero: a zero weight would make the clock jump a whole bucket for free.
        *weight = (*weight / mean).max(1e-6);
    }
    weights
}

/// A whole synthetic trace of `jobs` jobs for a machine of `procs` processors; `load_scale`
/// multiplies the arrival rate (1 is the model as published).
pub fn generate(jobs: usize, procs: u32, seed: u64, load_scale: f64) -> Trace {
    generate_shaped(jobs, procs, seed, &Shape::published(load_scale))
}

/// A whole synthetic trace of `jobs` jobs in the given shape.
pub fn generate_shaped(jobs: usize, procs: u32, seed: u64, shape: &Shape) -> Trace {
    let mut generator = Generator::new(procs, seed, shape);
    let records = (1..=jobs as u64).map(|n| generator.job(n)).collect();
    let mut note = format!(
        "; Note: generated by cosched with seed {seed}, load scale {}",
        shape.load_scale
    );
    if let Some(size_procs) = shape.size_procs {
        let _ = write!(note, ", sizes as for {size_procs} processors");
    }
    if shape.burst_prob > 0.0 {
        let _ = write!(
            note,
            ", bursts of up to {} jobs from {} of arrivals",
            shape.burst_most, shape.burst_prob
        );
    }
    let header = Header {
        lines: vec![
            "; Version: 2.2".to_string(),
            "; Computer: synthetic (Lublin-Feitelson model, all-jobs parameters)".to_string(),
            note,
            format!("; MaxJobs: {jobs}"),
            format!("; MaxRecords: {jobs}"),
            format!("; MaxNodes: {procs}"),
            format!("; MaxProcs: {procs}"),
        ],
    };
    Trace {
        header,
        records,
        ..Trace::default()
    }
}

/// What a workload looks like from the figures that set a replay's cost: how large its jobs
/// are, how busy its busiest hour is, and how much work it offers the machine.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ShapeStats {
    pub jobs: usize,
    pub median_procs: i64,
    /// Share of jobs asking at most 32 processors.
    pub share_at_most_32: f64,
    pub busiest_hour_submissions: usize,
    /// Work (processors x run time) over the machine's capacity from the first submission to
    /// the last: the utilization a scheduler that never lets a job wait would reach.
    pub offered_load: f64,
    /// Jobs running at once if none waited: on average (run time over span), and at most.
    pub mean_running: f64,
    pub most_running: usize,
}

impl ShapeStats {
    /// Of the records the replay keeps (run time and processors positive).
    pub fn of(trace: &Trace, procs: u32) -> ShapeStats {
        let kept: Vec<&Record> = trace
            .records
            .iter()
            .filter(|r| r.run_time() > 0 && r.procs() > 0 && r.submit() >= 0)
            .collect();
        let mut sizes: Vec<i64> = kept.iter().map(|r| r.procs()).collect();
        sizes.sort_unstable();
        let mut submits: Vec<i64> = kept.iter().map(|r| r.submit()).collect();
        submits.sort_unstable();
        let span = match (submits.first(), submits.last()) {
            (Some(first), Some(last)) if last > first => (last - first) as f64,
            _ => 1.0,
        };
        let mut busiest = 0;
        let mut from = 0;
        for (to, &t) in submits.iter().enumerate() {
            while t - submits[from] >= 3600 {
                from += 1;
            }
            busiest = busiest.max(to + 1 - from);
        }
        let work: f64 = kept
            .iter()
            .map(|r| r.run_time() as f64 * r.procs() as f64)
            .sum();
        let runs: f64 = kept.iter().map(|r| r.run_time() as f64).sum();
        let mut changes: Vec<(i64, i32)> = kept
            .iter()
            .flat_map(|r| [(r.submit(), 1), (r.submit() + r.run_time(), -1)])
            .collect();
        // Ends before starts at the same second: a job ending frees its place at once.
        changes.sort_unstable();
        let mut running = 0i64;
        let mut most_running = 0;
        for (_, change) in changes {
            running += i64::from(change);
            most_running = most_running.max(running as usize);
        }
        let n = sizes.len().max(1) as f64;
        ShapeStats {
            jobs: sizes.len(),
            median_procs: sizes.get(sizes.len() / 2).copied().unwrap_or(0),
            share_at_most_32: sizes.iter().filter(|&&s| s <= 32).count() as f64 / n,
            busiest_hour_submissions: busiest,
            offered_load: work / (f64::from(procs) * span),
            mean_running: runs / span,
            most_running,
        }
    }
}

impl std::fmt::Display for ShapeStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} jobs, median {} processors, {:.1} % ask at most 32, busiest hour {} submissions, offered load {:.3}; if none waited, {:.0} jobs running at once on average, {} at most",
            self.jobs,
            self.median_procs,
            100.0 * self.share_at_most_32,
            self.busiest_hour_submissions,
            self.offered_load,
            self.mean_running,
            self.most_running
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The figures of CEA-Curie-2011-2.1-cln that set a gang replay's cost, within stated
    /// tolerances, for the seed `bench/sim-scale` uses.
    #[test]
    fn curie_shape_has_the_logs_statistics() {
        let trace = generate_shaped(312_826, 93_312, 3, &Shape::curie());
        let stats = ShapeStats::of(&trace, 93_312);
        assert_eq!(stats.jobs, 312_826);
        assert_eq!(stats.median_procs, 32, "{stats}");
        assert!((0.50..=0.58).contains(&stats.share_at_most_32), "{stats}");
        assert!((0.55..=0.70).contains(&stats.offered_load), "{stats}");
        assert!(
            (1_300..=2_000).contains(&stats.busiest_hour_submissions),
            "{stats}"
        );
        assert!(stats.mean_running >= 200.0, "{stats}");
        assert!(stats.most_running >= 1_500, "{stats}");
        assert!(trace.records.iter().all(|r| r.procs() <= 93_312));
    }

    #[test]
    fn same_seed_same_workload() {
        assert_eq!(generate(200, 128, 5, 1.0), generate(200, 128, 5, 1.0));
        assert_ne!(generate(200, 128, 5, 1.0), generate(200, 128, 6, 1.0));
    }

    #[test]
    fn distributions_have_the_model_shape() {
        let trace = generate(20_000, 256, 1, 1.0);
        let n = trace.records.len() as f64;
        let sizes: Vec<i64> = trace.records.iter().map(|r| r.procs()).collect();
        let serial = sizes.iter().filter(|&&s| s == 1).count() as f64 / n;
        // Serial jobs: 24.4 % drawn directly, plus a few parallel draws rounding to 1.
        assert!((0.22..0.30).contains(&serial), "serial fraction {serial}");
        assert!(sizes.iter().all(|&s| (1..=256).contains(&s)));
        let pow2 = sizes
            .iter()
            .filter(|&&s| s > 1 && (s & (s - 1)) == 0)
            .count() as f64;
        let parallel = sizes.iter().filter(|&&s| s > 1).count() as f64;
        assert!(
            pow2 / parallel > 0.55,
            "power-of-two share {}",
            pow2 / parallel
        );
        let runs: Vec<i64> = trace.records.iter().map(|r| r.run_time()).collect();
        assert!(runs.iter().all(|&r| (1..=162_755).contains(&r)));
        let submits: Vec<i64> = trace.records.iter().map(|r| r.submit()).collect();
        assert!(
            submits.windows(2).all(|w| w[0] <= w[1]),
            "arrivals in order"
        );
        // Arrivals crowd into the working day: more between 8:00 and 18:00 than at night.
        let hour = |s: i64| (s % 86_400) / 3600;
        let day = submits
            .iter()
            .filter(|&&s| (8..18).contains(&hour(s)))
            .count();
        let night = submits
            .iter()
            .filter(|&&s| hour(s) < 6 || hour(s) >= 22)
            .count();
        assert!(day > 3 * night, "day {day} night {night}");
    }
}
