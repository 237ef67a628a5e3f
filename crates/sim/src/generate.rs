//! Synthetic rigid-job workloads from the Lublin–Feitelson model (JPDC 2003), "all jobs"
//! parameters as published. Facts used: ../shared/notes/workload-models.md.

use crate::rng::Rng;
use crate::swf::{Header, Record, Trace};

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

pub struct Generator {
    model: Model,
    procs: u32,
    rng: Rng,
    /// Cost in points of one second in each half hour of the day; mean 1.
    weights: [f64; BUCKETS],
    /// Arrival rate multiplier: 2 halves every gap between arrivals, doubling the load.
    load_scale: f64,
    now: f64,
}

impl Generator {
    pub fn new(model: Model, procs: u32, seed: u64, load_scale: f64) -> Generator {
        assert!(
            procs > 0,
            "a workload needs a machine of at least one processor"
        );
        assert!(
            load_scale.is_finite() && load_scale > 0.0,
            "the load scale must be positive"
        );
        let weights = day_weights(model.anum, model.bnum);
        Generator {
            model,
            procs,
            rng: Rng::new(seed),
            weights,
            load_scale,
            now: 0.0,
        }
    }

    /// Log2 of the machine size and the middle of the two-stage uniform, scaled to the machine.
    fn size_bounds(&self) -> (f64, f64) {
        let high = f64::from(self.procs).log2();
        (high - 2.5, high)
    }

    fn size(&mut self) -> u32 {
        let m = &self.model;
        if self.procs == 1 || self.rng.uniform() < m.serial_prob {
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

    /// The next job as an SWF record numbered `number`.
    pub fn job(&mut self, number: u64) -> Record {
        let submit = self.arrive();
        let size = self.size();
        let run = self.run_time(size);
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
    let mut generator = Generator::new(Model::all_jobs(), procs, seed, load_scale);
    let records = (1..=jobs as u64).map(|n| generator.job(n)).collect();
    let header = Header {
        lines: vec![
            "; Version: 2.2".to_string(),
            "; Computer: synthetic (Lublin-Feitelson model, all-jobs parameters)".to_string(),
            format!("; Note: generated by cosched with seed {seed}, load scale {load_scale}"),
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

#[cfg(test)]
mod tests {
    use super::*;

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
