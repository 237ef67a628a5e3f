//! The controller's test harness, after Nomad's scheduler harness: the controller's traits
//! implemented in memory (a store that can be told to refuse writes, a sink that records every
//! order, clients that record every answer) and a virtual clock, so a rule is tested as
//! "given these jobs and nodes, when this arrives at this time, then these orders, answers
//! and records", as an ordinary user, in milliseconds.

use crate::clients::{ClientId, Clients, Until};
use crate::store::{history_of, JobRecord, Store, StoreError};
use crate::{ApiError, Controller, Settings};
use cosched_core::{Config, JobId, Micros, Partition, Rotation, Scheduler, TimeLimits, UserLimits};
use cosched_os::unix::Credentials;
use cosched_proto::api::{HistoryRequest, Reply, RunRequest};
use cosched_proto::{
    Command, Event, Mode, Node, NodeInfo, NodeMap, Order, OrderSink, StallAction, PROTOCOL_VERSION,
};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

mod auto;
mod history_tests;
mod limits;
mod properties;
mod stall;
mod tests;

fn lock<T>(shared: &Mutex<T>) -> MutexGuard<'_, T> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

/// Records in memory; `refuse` makes every write fail, as a full disk does.
#[derive(Default)]
pub struct Stored {
    pub records: BTreeMap<JobId, JobRecord>,
    counter: JobId,
    pub refuse: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum MemoryStoreError {
    #[error("the harness's store refuses writes")]
    Refused,
    #[error("job {0} exists already")]
    Taken(JobId),
}

/// The store the controller is given; the harness keeps a handle to the same records.
#[derive(Clone, Default)]
pub struct MemoryStore(Arc<Mutex<Stored>>);

impl MemoryStore {
    fn writable(&self) -> Result<MutexGuard<'_, Stored>, MemoryStoreError> {
        let stored = lock(&self.0);
        match stored.refuse {
            true => Err(MemoryStoreError::Refused),
            false => Ok(stored),
        }
    }
}

impl Store for MemoryStore {
    fn history(&self, query: &HistoryRequest) -> Result<Vec<JobRecord>, StoreError> {
        Ok(history_of(query, lock(&self.0).records.values().cloned()))
    }

    fn load(&self, ended: usize) -> Result<Vec<JobRecord>, StoreError> {
        let stored = lock(&self.0);
        let (finished, mut kept): (Vec<&JobRecord>, Vec<&JobRecord>) =
            stored.records.values().partition(|r| r.status.ended());
        kept.extend(finished.into_iter().rev().take(ended));
        let mut kept: Vec<JobRecord> = kept.into_iter().cloned().collect();
        kept.sort_by_key(|r| r.id);
        Ok(kept)
    }

    fn get(&self, job: JobId) -> Result<Option<JobRecord>, StoreError> {
        Ok(lock(&self.0).records.get(&job).cloned())
    }

    fn insert(&mut self, record: &JobRecord) -> Result<(), StoreError> {
        let mut stored = self.writable()?;
        if stored.records.contains_key(&record.id) {
            return Err(MemoryStoreError::Taken(record.id).into());
        }
        stored.records.insert(record.id, record.clone());
        Ok(())
    }

    fn put(&mut self, record: &JobRecord) -> Result<(), StoreError> {
        self.writable()?.records.insert(record.id, record.clone());
        Ok(())
    }

    fn next_id(&mut self) -> Result<JobId, StoreError> {
        let mut stored = self.writable()?;
        let highest = stored.records.keys().next_back().copied().unwrap_or(0);
        stored.counter = stored.counter.max(highest) + 1;
        Ok(stored.counter)
    }
}

/// Every order sent, by node, and the nodes forgotten.
#[derive(Default)]
pub struct Sent {
    pub orders: Vec<(String, Command)>,
    pub forgotten: Vec<String>,
}

/// The order sink: one machine's (it carries descriptors) or a cluster's.
#[derive(Clone)]
pub struct Recorder {
    sent: Arc<Mutex<Sent>>,
    carries_stdio: bool,
}

impl OrderSink for Recorder {
    fn deliver(&self, node: &str, order: Order) {
        lock(&self.sent)
            .orders
            .push((node.to_string(), order.command));
    }

    fn carries_stdio(&self) -> bool {
        self.carries_stdio
    }

    fn forget(&self, node: &str) {
        lock(&self.sent).forgotten.push(node.to_string());
    }
}

/// What the clients heard, and who is parked on what.
#[derive(Default)]
pub struct Heard {
    pub replies: Vec<(ClientId, Reply)>,
    pub parked: BTreeMap<ClientId, (JobId, Until)>,
}

#[derive(Clone, Default)]
pub struct Listeners(Arc<Mutex<Heard>>);

impl Listeners {
    fn answer(&self, job: JobId, reply: &Reply, ended: bool) {
        let mut heard = lock(&self.0);
        let answered: Vec<ClientId> = heard
            .parked
            .iter()
            .filter(|(_, &(on, until))| on == job && (ended || until == Until::Start))
            .map(|(&client, _)| client)
            .collect();
        for client in answered {
            heard.parked.remove(&client);
            heard.replies.push((client, reply.clone()));
        }
    }
}

impl Clients for Listeners {
    fn reply(&mut self, client: ClientId, reply: &Reply) {
        lock(&self.0).replies.push((client, reply.clone()));
    }

    fn park(
        &mut self,
        client: ClientId,
        job: JobId,
        _uid: u32,
        until: Until,
    ) -> Result<(), ApiError> {
        lock(&self.0).parked.insert(client, (job, until));
        Ok(())
    }

    fn ended(&mut self, job: JobId, reply: &Reply) {
        self.answer(job, reply, true);
    }

    fn started(&mut self, job: JobId, reply: &Reply) {
        self.answer(job, reply, false);
    }

    fn waiting(&self) -> usize {
        lock(&self.0).parked.len()
    }
}

/// A controller over memory, with the time in the test's hands.
pub struct Harness {
    pub controller: Controller,
    pub store: MemoryStore,
    sent: Arc<Mutex<Sent>>,
    pub clients: Listeners,
    pub now: Micros,
    settings: Settings,
    config: Config,
    /// Each node's memory, when the machine has memory-fit admission.
    node_memory: Option<u64>,
    carries_stdio: bool,
    next_client: ClientId,
}

/// A slot of 100 ms, as the daemon's tests use.
const QUANTUM: Micros = 100_000;
/// How long an interactive job preempts the batch jobs (where the config lets it).
pub const INTERACTIVE_STRETCH: Micros = 10_000_000;

impl Harness {
    /// One machine of `procs` processors, node `local`, whose agent carries descriptors.
    pub fn machine(procs: u32) -> Harness {
        Harness::new(&[("local", procs)], true)
    }

    /// A cluster of nodes (name, processors), whose agents are elsewhere.
    pub fn cluster(nodes: &[(&str, u32)]) -> Harness {
        Harness::new(nodes, false)
    }

    fn new(nodes: &[(&str, u32)], carries_stdio: bool) -> Harness {
        let nodes = nodes
            .iter()
            .map(|&(name, procs)| Node {
                name: name.to_string(),
                cpus: Partition::block(0, procs),
                address: (!carries_stdio).then(|| name.to_string()),
            })
            .collect();
        let settings = Settings {
            mode: Mode::Gang,
            rotation: Rotation::new(0, QUANTUM),
            nodes: NodeMap::new(nodes).expect("nodes"),
            keep_ended: 1_000,
            max_files: 1 << 20,
            registration: Some("/usr/bin/cosched".into()),
            time_limits: Default::default(),
            user_limits: Default::default(),
            default_mem_per_cpu: None,
            stall_action: StallAction::Report,
            interactive_stretch: Some(INTERACTIVE_STRETCH),
        };
        let config = Config {
            mpl: 2,
            ..Config::default()
        };
        let store = MemoryStore::default();
        let sent = Arc::new(Mutex::new(Sent::default()));
        let clients = Listeners::default();
        let controller = Harness::controller(
            &settings,
            config.clone(),
            None,
            &store,
            &sent,
            &clients,
            carries_stdio,
        );
        Harness {
            controller,
            store,
            sent,
            clients,
            now: 1_000_000,
            settings,
            config,
            node_memory: None,
            carries_stdio,
            next_client: 0,
        }
    }

    fn controller(
        settings: &Settings,
        config: Config,
        node_memory: Option<u64>,
        store: &MemoryStore,
        sent: &Arc<Mutex<Sent>>,
        clients: &Listeners,
        carries_stdio: bool,
    ) -> Controller {
        let machine = settings.nodes.machine().expect("a machine");
        let machine = match node_memory {
            Some(bytes) => machine.with_node_memory(bytes),
            None => machine,
        };
        let orders = Recorder {
            sent: Arc::clone(sent),
            carries_stdio,
        };
        Controller::new(
            settings.clone(),
            Scheduler::new(machine, config).expect("a scheduler"),
            Box::new(store.clone()),
            Box::new(orders),
            Box::new(clients.clone()),
        )
    }

    /// A machine of `procs` processors whose scheduler's configuration `change` sets.
    pub fn configured(procs: u32, change: impl FnOnce(&mut Config)) -> Harness {
        let mut h = Harness::machine(procs);
        change(&mut h.config);
        h.restart();
        h
    }

    /// The controller restarted with `action` for stalled jobs.
    pub fn set_stall_action(&mut self, action: StallAction) {
        self.settings.stall_action = action;
        self.restart();
    }

    /// A machine of `procs` processors whose scheduler runs EASY backfilling.
    pub fn backfilling(procs: u32) -> Harness {
        Harness::configured(procs, |c| c.backfill = cosched_core::Backfill::Easy)
    }

    /// A machine of `procs` processors, one node of `bytes` of memory, admitting by memory.
    pub fn with_memory(procs: u32, bytes: u64) -> Harness {
        let mut h = Harness::machine(procs);
        h.node_memory = Some(bytes);
        h.restart();
        h
    }

    /// The policy's time and per-user limits, now and after any restart.
    pub fn set_limits(&mut self, time: TimeLimits, user: UserLimits) {
        self.settings.time_limits = time.clone();
        self.settings.user_limits = user;
        self.controller.set_limits(time, user, self.now);
    }

    /// A controller started afresh over the same store (a restart, or a standby taking
    /// over), having taken back what the store holds.
    pub fn restart(&mut self) {
        self.controller = Harness::controller(
            &self.settings,
            self.config.clone(),
            self.node_memory,
            &self.store,
            &self.sent,
            &self.clients,
            self.carries_stdio,
        );
        let records = self.store.load(self.settings.keep_ended).expect("records");
        self.controller.recover(records, self.now);
    }

    /// Node `name` of `procs` processors as its agent registers it.
    pub fn node_info(name: &str, procs: u32, now: Micros) -> NodeInfo {
        NodeInfo {
            protocol: PROTOCOL_VERSION,
            node: name.into(),
            cpus: Partition::block(0, procs),
            mode: Mode::Gang,
            agent: format!("{name}:1"),
            joined_us: now,
            address: None,
            lease_ttl_s: 10,
            memory_bytes: None,
        }
    }

    pub fn user(uid: u32) -> Credentials {
        Credentials {
            pid: 4242,
            uid,
            gid: uid,
            groups: vec![uid],
            limits: vec![],
        }
    }

    /// A job of `procs` processors running `argv`.
    pub fn request(procs: u32, argv: &[&str]) -> RunRequest {
        RunRequest {
            argv: argv.iter().map(|a| a.to_string()).collect(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            cwd: "/tmp".into(),
            procs,
            node_count: None,
            class: None,
            name: None,
            detach: true,
            stdio: false,
            output: None,
            error: None,
            time_limit_s: None,
            mem_bytes: None,
            mem_per_cpu_bytes: None,
            mode: None,
        }
    }

    /// `uid` submits a job of `procs` processors.
    pub fn run(&mut self, uid: u32, procs: u32) -> Result<JobId, ApiError> {
        let run = Harness::request(procs, &["sleep", "60"]);
        self.controller
            .submit(&Harness::user(uid), run, None, self.now)
    }

    pub fn event(&mut self, event: Event) {
        self.controller.handle_event(event, self.now);
    }

    pub fn advance(&mut self, us: Micros) {
        self.now += us;
    }

    /// A new client, as the transport names one.
    pub fn client(&mut self) -> ClientId {
        self.next_client += 1;
        self.next_client
    }

    /// The orders sent since the last call, by node.
    pub fn orders(&mut self) -> Vec<(String, Command)> {
        std::mem::take(&mut lock(&self.sent).orders)
    }

    pub fn forgotten(&self) -> Vec<String> {
        lock(&self.sent).forgotten.clone()
    }

    /// What `client` heard, in order.
    pub fn heard(&self, client: ClientId) -> Vec<Reply> {
        let heard = lock(&self.clients.0);
        let replies = heard.replies.iter().filter(|(c, _)| *c == client);
        replies.map(|(_, reply)| reply.clone()).collect()
    }

    pub fn stored(&self, job: JobId) -> Option<JobRecord> {
        lock(&self.store.0).records.get(&job).cloned()
    }

    /// Makes every write to the store fail (or succeed again).
    pub fn refuse_writes(&self, refuse: bool) {
        lock(&self.store.0).refuse = refuse;
    }

    /// Jobs started (`Command::Start`) since the last `orders`, with whether they were
    /// launched (`Start` with a launch) rather than taken back into the rotation.
    pub fn starts(orders: &[(String, Command)]) -> Vec<(JobId, bool)> {
        orders
            .iter()
            .filter_map(|(_, command)| match command {
                Command::Start { job, launch, .. } => Some((*job, launch.is_some())),
                _ => None,
            })
            .collect()
    }
}
