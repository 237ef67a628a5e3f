//! Auto jobs: a mode chosen once every node's reports settle it, at the last window at the
//! latest, kept in the record and sent to every node of the job.

use super::Harness;
use cosched_core::JobId;
use cosched_proto::{Behaviour, Command, Event, Mode, BEHAVIOUR_WINDOWS};

const UID: u32 = 1000;

fn auto_job(h: &mut Harness) -> JobId {
    let mut run = Harness::request(4, &["mpirun", "-np", "4", "prog"]);
    run.mode = Some(Mode::Auto);
    let job = h
        .controller
        .submit(&Harness::user(UID), run, None, h.now)
        .unwrap();
    h.orders();
    job
}

fn window(job: JobId, node: &str, run_per_switch_in_us: f64) -> Event {
    Event::Behaviour {
        job,
        node: node.into(),
        behaviour: Behaviour {
            window_us: 1_000_000,
            run: 0.4,
            queued: 0.3,
            asleep: 0.3,
            run_per_switch_in_us,
            io: Some(0.0),
        },
    }
}

fn set_modes(h: &mut Harness) -> Vec<(String, Mode)> {
    h.orders()
        .into_iter()
        .filter_map(|(node, command)| match command {
            Command::SetMode { mode, .. } => Some((node, mode)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_window_between_the_lines_waits_for_the_next_and_a_fine_one_on_any_node_makes_it_gang() {
    let mut h = Harness::cluster(&[("a", 2), ("b", 2)]);
    let job = auto_job(&mut h);
    h.event(window(job, "a", 52.0));
    h.event(window(job, "b", 150.0));
    assert_eq!(
        set_modes(&mut h),
        vec![],
        "52 µs a switch-in settles nothing"
    );
    assert_eq!(h.stored(job).unwrap().runs_as, None);
    h.event(window(job, "b", 160.0));
    assert_eq!(set_modes(&mut h), vec![], "node a has not said more");
    h.event(window(job, "a", 6.0));
    let told = set_modes(&mut h);
    assert_eq!(
        told,
        vec![("a".into(), Mode::Gang), ("b".into(), Mode::Gang)]
    );
    let record = h.stored(job).unwrap();
    assert_eq!(record.runs_as, Some(Mode::Gang));
    assert!(
        record.mode_why.unwrap().contains("6 µs between waits"),
        "the finest window speaks"
    );
    // A later window (sent before the agent heard) changes nothing.
    h.event(window(job, "a", 500.0));
    assert_eq!(set_modes(&mut h), vec![]);
    assert_eq!(h.stored(job).unwrap().runs_as, Some(Mode::Gang));
    h.controller.audit().unwrap();
}

#[test]
fn a_job_between_the_lines_to_the_last_window_is_coarse_and_a_clear_one_is_at_once() {
    let mut h = Harness::cluster(&[("a", 2), ("b", 2)]);
    let job = auto_job(&mut h);
    for sent in 1..=BEHAVIOUR_WINDOWS {
        h.event(window(job, "a", 50.0));
        h.event(window(job, "b", 60.0));
        let told = set_modes(&mut h);
        if sent < BEHAVIOUR_WINDOWS {
            assert_eq!(told, vec![], "window {sent}");
        } else {
            assert_eq!(told.len(), 2, "{told:?}");
            assert!(told.iter().all(|(_, mode)| *mode == Mode::Moderate));
        }
    }
    assert_eq!(h.stored(job).unwrap().runs_as, Some(Mode::Moderate));

    let clear = auto_job(&mut h);
    h.event(window(clear, "a", 70.0));
    assert_eq!(set_modes(&mut h), vec![], "node b has not reported");
    h.event(window(clear, "b", 300.0));
    assert_eq!(set_modes(&mut h).len(), 2);
    assert_eq!(h.stored(clear).unwrap().runs_as, Some(Mode::Moderate));
    h.controller.audit().unwrap();
}
