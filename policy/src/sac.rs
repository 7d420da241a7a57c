//! Soft Actor-Critic (Haarnoja et al. 2018) for the LC share (§3.2.1,
//! Algorithm 1), on candle: a tanh-squashed Gaussian actor, twin Q critics
//! with Polyak-averaged targets, a replay buffer and automatic entropy
//! tuning. State: FMem usage ratio, FMem access ratio, normalised access
//! count (Algorithm 1) and the last p99 over the SLO. Action: one scalar in [-1, 1], scaled by the caller to eq. 1's
//! bound.

use std::collections::VecDeque;
use std::path::Path;

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{linear, AdamW, Linear, Module, Optimizer, ParamsAdamW, VarBuilder, VarMap};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Number of state features.
pub const STATE_DIM: usize = 4;
const LOG_STD_MIN: f32 = -5.0;
const LOG_STD_MAX: f32 = 2.0;
const LN_2PI_HALF: f64 = 0.918_938_533_204_672_7;

/// Hyper-parameters.
#[derive(Clone, Debug)]
pub struct SacConfig {
    /// Hidden units per layer (two layers).
    pub hidden: usize,
    /// Discount.
    pub gamma: f64,
    /// Polyak factor for the target critics.
    pub tau: f64,
    /// Learning rate of every optimiser.
    pub lr: f64,
    /// Mini-batch size.
    pub batch: usize,
    /// Train after every this many new transitions (§4: 50).
    pub train_every: usize,
    /// Gradient steps per training round.
    pub grad_steps: usize,
    /// Replay capacity.
    pub capacity: usize,
    /// RNG seed (exploration noise, sampling).
    pub seed: u64,
    /// Entropy the temperature tuning aims at (SAC's usual −dim(action)
    /// is −1; lower makes the policy more decisive).
    pub target_entropy: f64,
    /// Transitions a loaded (pretrained) agent gathers before its first
    /// training round. Its replay buffer starts empty: a round on the
    /// first batch, a few minutes of one load with the actor's
    /// deterministic action, moved the shipped actor by whole units (at
    /// 50 % load from 4-5 to 7, at 80 % into violations), the critic
    /// being fitted to one action in one state. A fresh agent trains
    /// from its first batch.
    pub online_warmup: usize,
}

impl Default for SacConfig {
    fn default() -> Self {
        Self {
            hidden: 64,
            gamma: 0.9,
            tau: 0.01,
            lr: 1e-3,
            batch: 64,
            train_every: 50,
            grad_steps: 50,
            capacity: 50_000,
            seed: 7,
            target_entropy: -3.0,
            online_warmup: 500,
        }
    }
}

/// SAC failures (candle errors, bad model files).
#[derive(Debug, thiserror::Error)]
pub enum SacError {
    /// Tensor library error.
    #[error("SAC tensor operation failed: {0}")]
    Candle(#[from] candle_core::Error),
    /// The model file does not fit this network.
    #[error("cannot load SAC model {path}: {reason}")]
    Load {
        /// Path.
        path: String,
        /// Why.
        reason: String,
    },
}

/// One stored transition.
#[derive(Clone, Debug, PartialEq)]
pub struct Transition {
    /// State.
    pub s: [f32; STATE_DIM],
    /// Action taken, in [-1, 1].
    pub a: f32,
    /// Reward (eq. 2).
    pub r: f32,
    /// Next state.
    pub s2: [f32; STATE_DIM],
}

/// Losses of the last training round.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TrainStats {
    /// Mean critic loss.
    pub critic_loss: f32,
    /// Mean actor loss.
    pub actor_loss: f32,
    /// Entropy temperature α.
    pub alpha: f32,
}

struct Mlp {
    l1: Linear,
    l2: Linear,
    out: Linear,
}

impl Mlp {
    fn new(
        vb: VarBuilder,
        input: usize,
        hidden: usize,
        output: usize,
    ) -> candle_core::Result<Self> {
        Ok(Self {
            l1: linear(input, hidden, vb.pp("l1"))?,
            l2: linear(hidden, hidden, vb.pp("l2"))?,
            out: linear(hidden, output, vb.pp("out"))?,
        })
    }

    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let h = self.l1.forward(x)?.relu()?;
        let h = self.l2.forward(&h)?.relu()?;
        self.out.forward(&h)
    }
}

/// The agent.
pub struct Sac {
    cfg: SacConfig,
    dev: Device,
    vars: VarMap,
    actor: Mlp,
    q: [Mlp; 2],
    q_target: [Mlp; 2],
    log_alpha: Var,
    actor_opt: AdamW,
    critic_opt: AdamW,
    alpha_opt: AdamW,
    buffer: VecDeque<Transition>,
    since_train: usize,
    /// Transitions held before the first round (batch, or
    /// `online_warmup` for a loaded agent).
    learning_starts: usize,
    rng: SmallRng,
    trained_rounds: u64,
}

fn vars_with_prefix(map: &VarMap, prefixes: &[&str]) -> Vec<Var> {
    // A poisoned lock only means another thread panicked mid-update; the
    // variables themselves are still valid tensors.
    let data = map.data().lock().unwrap_or_else(|e| e.into_inner());
    let mut named: Vec<(&String, &Var)> = data
        .iter()
        .filter(|(k, _)| prefixes.iter().any(|p| k.starts_with(p)))
        .collect();
    named.sort_by(|a, b| a.0.cmp(b.0));
    named.into_iter().map(|(_, v)| v.clone()).collect()
}

impl Sac {
    /// A fresh agent.
    pub fn new(cfg: SacConfig) -> Result<Self, SacError> {
        let dev = Device::Cpu;
        let vars = VarMap::new();
        let vb = VarBuilder::from_varmap(&vars, DType::F32, &dev);
        let h = cfg.hidden;
        let actor = Mlp::new(vb.pp("actor"), STATE_DIM, h, 2)?;
        let q = [
            Mlp::new(vb.pp("q1"), STATE_DIM + 1, h, 1)?,
            Mlp::new(vb.pp("q2"), STATE_DIM + 1, h, 1)?,
        ];
        let q_target = [
            Mlp::new(vb.pp("q1_target"), STATE_DIM + 1, h, 1)?,
            Mlp::new(vb.pp("q2_target"), STATE_DIM + 1, h, 1)?,
        ];
        vb.pp("alpha")
            .get_with_hints(1, "log_alpha", candle_nn::Init::Const(0.0))?;
        let log_alpha = vars_with_prefix(&vars, &["alpha."])
            .pop()
            .ok_or_else(|| candle_core::Error::Msg("log_alpha missing".into()))?;
        let params = ParamsAdamW {
            lr: cfg.lr,
            weight_decay: 0.0,
            ..ParamsAdamW::default()
        };
        let actor_opt = AdamW::new(vars_with_prefix(&vars, &["actor."]), params.clone())?;
        let critic_opt = AdamW::new(vars_with_prefix(&vars, &["q1.", "q2."]), params.clone())?;
        let alpha_opt = AdamW::new(vec![log_alpha.clone()], params)?;
        let rng = SmallRng::seed_from_u64(cfg.seed);
        let learning_starts = cfg.batch;
        let mut sac = Self {
            cfg,
            dev,
            vars,
            actor,
            q,
            q_target,
            log_alpha,
            actor_opt,
            critic_opt,
            alpha_opt,
            buffer: VecDeque::new(),
            since_train: 0,
            learning_starts,
            rng,
            trained_rounds: 0,
        };
        sac.seeded_init()?;
        sac.soft_update(1.0)?;
        Ok(sac)
    }

    /// Re-draws the actor's and critics' initial weights from the seeded
    /// RNG, with candle's own initial distributions (weights Kaiming-normal
    /// for ReLU, N(0, 2/fan_in); biases U(±1/√fan_in)): candle's CPU RNG
    /// cannot be seeded, and `tier-policy train --seed` must give the same
    /// model every time.
    fn seeded_init(&mut self) -> candle_core::Result<()> {
        let named: Vec<(String, Var)> = {
            let data = self.vars.data().lock().unwrap_or_else(|e| e.into_inner());
            let mut v: Vec<(String, Var)> = data
                .iter()
                .filter(|(k, _)| ["actor.", "q1.", "q2."].iter().any(|p| k.starts_with(p)))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            v.sort_by(|a, b| a.0.cmp(&b.0));
            v
        };
        let fan_in = |name: &str| -> Option<usize> {
            let weight = format!("{}.weight", name.strip_suffix(".bias")?);
            named
                .iter()
                .find(|(k, _)| *k == weight)
                .and_then(|(_, w)| w.dims().get(1).copied())
        };
        for (name, var) in &named {
            let n = var.elem_count();
            let values: Vec<f32> = if name.ends_with(".weight") {
                let std = (2.0 / var.dims().get(1).copied().unwrap_or(1).max(1) as f64).sqrt();
                self.gaussian(n)
                    .into_iter()
                    .map(|x| (f64::from(x) * std) as f32)
                    .collect()
            } else {
                let bound = 1.0 / (fan_in(name).unwrap_or(1).max(1) as f64).sqrt();
                (0..n)
                    .map(|_| self.rng.random_range(-bound..bound) as f32)
                    .collect()
            };
            var.set(&Tensor::from_vec(values, var.shape(), &self.dev)?)?;
        }
        Ok(())
    }

    /// Loads weights saved by [`Sac::save`] into a fresh agent.
    pub fn load(cfg: SacConfig, path: &Path) -> Result<Self, SacError> {
        let mut sac = Self::new(cfg)?;
        sac.vars.load(path).map_err(|e| SacError::Load {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        sac.check_finite(&path.display().to_string())?;
        sac.pretrained();
        Ok(sac)
    }

    /// Loads every network from a safetensors image in memory (`what`
    /// names it in errors), e.g. the model built into the binary.
    pub fn load_bytes(cfg: SacConfig, bytes: &[u8], what: &str) -> Result<Self, SacError> {
        let mut sac = Self::new(cfg)?;
        let err = |reason: String| SacError::Load {
            path: what.to_string(),
            reason,
        };
        let tensors = candle_core::safetensors::load_buffer(bytes, &sac.dev)
            .map_err(|e| err(e.to_string()))?;
        let names: Vec<String> = match sac.vars.data().lock() {
            Ok(d) => d.keys().cloned().collect(),
            Err(p) => p.into_inner().keys().cloned().collect(),
        };
        for name in names {
            let t = tensors
                .get(&name)
                .ok_or_else(|| err(format!("no tensor {name}")))?;
            sac.vars.set_one(&name, t).map_err(|e| err(e.to_string()))?;
        }
        sac.check_finite(what)?;
        sac.pretrained();
        Ok(sac)
    }

    /// A loaded agent fine-tunes only once its buffer holds
    /// `online_warmup` transitions.
    fn pretrained(&mut self) {
        self.learning_starts = self.cfg.online_warmup.max(self.cfg.batch);
    }

    fn check_finite(&self, what: &str) -> Result<(), SacError> {
        for v in self.vars.all_vars() {
            let finite = v
                .as_tensor()
                .flatten_all()?
                .to_vec1::<f32>()?
                .iter()
                .all(|x| x.is_finite());
            if !finite {
                return Err(SacError::Load {
                    path: what.to_string(),
                    reason: "non-finite weights".into(),
                });
            }
        }
        Ok(())
    }

    /// Saves every network (safetensors).
    pub fn save(&self, path: &Path) -> Result<(), SacError> {
        Ok(self.vars.save(path)?)
    }

    /// Training rounds done so far.
    pub fn trained_rounds(&self) -> u64 {
        self.trained_rounds
    }

    /// Transitions held.
    pub fn buffered(&self) -> usize {
        self.buffer.len()
    }

    fn gaussian(&mut self, n: usize) -> Vec<f32> {
        // Box-Muller from the seeded RNG, so runs are reproducible.
        (0..n)
            .map(|_| {
                let u1: f64 = self.rng.random::<f64>().max(1e-12);
                let u2: f64 = self.rng.random();
                ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
            })
            .collect()
    }

    /// Squashed sample and its log-probability for a batch of states.
    fn sample(&mut self, s: &Tensor) -> candle_core::Result<(Tensor, Tensor)> {
        let n = s.dim(0)?;
        let out = self.actor.forward(s)?;
        let mean = out.narrow(1, 0, 1)?;
        let log_std = out.narrow(1, 1, 1)?.clamp(LOG_STD_MIN, LOG_STD_MAX)?;
        let std = log_std.exp()?;
        let eps = Tensor::from_vec(self.gaussian(n), (n, 1), &self.dev)?;
        let u = (&mean + std.mul(&eps)?)?;
        let a = u.tanh()?;
        // log N(u; mean, std) - log(1 - tanh(u)²)
        let log_n = ((eps.sqr()? * -0.5)? - &log_std)?.affine(1.0, -LN_2PI_HALF)?;
        let squash = (a.sqr()?.affine(-1.0, 1.0 + 1e-6)?).log()?;
        let log_p = (log_n - squash)?.sum_keepdim(1)?;
        Ok((a, log_p))
    }

    /// The action for one state: the mean (deterministic) or a sample
    /// (exploring). NaN in the state or network gives NaN; the caller
    /// falls back to its safe controller.
    pub fn act(&mut self, s: [f32; STATE_DIM], explore: bool) -> Result<f32, SacError> {
        if !s.iter().all(|x| x.is_finite()) {
            return Ok(f32::NAN);
        }
        let st = Tensor::from_slice(&s, (1, STATE_DIM), &self.dev)?;
        let a = if explore {
            self.sample(&st)?.0
        } else {
            self.actor.forward(&st)?.narrow(1, 0, 1)?.tanh()?
        };
        Ok(a.flatten_all()?.to_vec1::<f32>()?[0])
    }

    /// Stores a transition; trains every `train_every` transitions once a
    /// batch is available. Non-finite transitions are refused (`false`).
    pub fn observe(&mut self, t: Transition) -> Result<Option<TrainStats>, SacError> {
        let finite =
            t.s.iter().chain(&t.s2).all(|x| x.is_finite()) && t.a.is_finite() && t.r.is_finite();
        if !finite {
            return Ok(None);
        }
        if self.buffer.len() >= self.cfg.capacity {
            self.buffer.pop_front();
        }
        self.buffer.push_back(t);
        self.since_train += 1;
        if self.since_train >= self.cfg.train_every && self.buffer.len() >= self.learning_starts {
            self.since_train = 0;
            return self.train().map(Some);
        }
        Ok(None)
    }

    fn batch(&mut self) -> candle_core::Result<[Tensor; 4]> {
        let n = self.cfg.batch;
        let (mut s, mut a, mut r, mut s2) = (
            Vec::with_capacity(n * STATE_DIM),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n * STATE_DIM),
        );
        for _ in 0..n {
            let t = &self.buffer[self.rng.random_range(0..self.buffer.len())];
            s.extend_from_slice(&t.s);
            a.push(t.a);
            r.push(t.r);
            s2.extend_from_slice(&t.s2);
        }
        Ok([
            Tensor::from_vec(s, (n, STATE_DIM), &self.dev)?,
            Tensor::from_vec(a, (n, 1), &self.dev)?,
            Tensor::from_vec(r, (n, 1), &self.dev)?,
            Tensor::from_vec(s2, (n, STATE_DIM), &self.dev)?,
        ])
    }

    fn q_min(nets: &[Mlp; 2], sa: &Tensor) -> candle_core::Result<Tensor> {
        nets[0].forward(sa)?.minimum(&nets[1].forward(sa)?)
    }

    /// `grad_steps` SAC updates on random mini-batches.
    pub fn train(&mut self) -> Result<TrainStats, SacError> {
        let target_entropy = self.cfg.target_entropy;
        let mut stats = TrainStats::default();
        for _ in 0..self.cfg.grad_steps {
            let [s, a, r, s2] = self.batch()?;
            let alpha = self.log_alpha.as_tensor().exp()?.detach();
            // Critic: soft Bellman target from the target networks.
            let (a2, logp2) = self.sample(&s2)?;
            let q_next = Self::q_min(&self.q_target, &Tensor::cat(&[&s2, &a2], 1)?)?;
            let soft = (q_next - logp2.broadcast_mul(&alpha)?)?;
            let y = (r + soft.affine(self.cfg.gamma, 0.0)?)?.detach();
            let sa = Tensor::cat(&[&s, &a], 1)?;
            let l1 = (self.q[0].forward(&sa)? - &y)?.sqr()?.mean_all()?;
            let l2 = (self.q[1].forward(&sa)? - &y)?.sqr()?.mean_all()?;
            let critic_loss = (l1 + l2)?;
            self.critic_opt.backward_step(&critic_loss)?;
            // Actor: maximise min Q - α log π.
            let (a_new, logp) = self.sample(&s)?;
            let q_new = Self::q_min(&self.q, &Tensor::cat(&[&s, &a_new], 1)?)?;
            let actor_loss = (logp.broadcast_mul(&alpha)? - q_new)?.mean_all()?;
            self.actor_opt.backward_step(&actor_loss)?;
            // Temperature: keep the policy's entropy near the target.
            let alpha_loss = (self
                .log_alpha
                .as_tensor()
                .broadcast_mul(&logp.detach().affine(1.0, target_entropy)?)?
                * -1.0)?
                .mean_all()?;
            self.alpha_opt.backward_step(&alpha_loss)?;
            self.soft_update(self.cfg.tau)?;
            stats.critic_loss += critic_loss.to_scalar::<f32>()? / self.cfg.grad_steps as f32;
            stats.actor_loss += actor_loss.to_scalar::<f32>()? / self.cfg.grad_steps as f32;
        }
        stats.alpha = self
            .log_alpha
            .as_tensor()
            .exp()?
            .flatten_all()?
            .to_vec1::<f32>()?[0];
        self.trained_rounds += 1;
        Ok(stats)
    }

    fn soft_update(&mut self, tau: f64) -> candle_core::Result<()> {
        for (src, dst) in [("q1.", "q1_target."), ("q2.", "q2_target.")] {
            let online = vars_with_prefix(&self.vars, &[src]);
            let target = vars_with_prefix(&self.vars, &[dst]);
            for (o, t) in online.iter().zip(&target) {
                let mixed = ((o.as_tensor() * tau)? + (t.as_tensor() * (1.0 - tau))?)?;
                t.set(&mixed)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learns_a_one_step_bandit() {
        // Reward is highest for actions near +0.5: the mean action must
        // move there within a few hundred transitions.
        let mut sac = Sac::new(SacConfig {
            seed: 1,
            ..SacConfig::default()
        })
        .unwrap();
        let s = [0.5f32, 0.5, 0.5, 0.5];
        for _ in 0..600 {
            let a = sac.act(s, true).unwrap();
            assert!((-1.0..=1.0).contains(&a));
            let r = 1.0 - 4.0 * (a - 0.5) * (a - 0.5);
            sac.observe(Transition { s, a, r, s2: s }).unwrap();
        }
        assert!(sac.trained_rounds() >= 10);
        let a = sac.act(s, false).unwrap();
        assert!((a - 0.5).abs() < 0.2, "mean action {a}");
    }

    #[test]
    fn save_and_load_round_trip_and_refuse_bad_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.safetensors");
        let mut sac = Sac::new(SacConfig::default()).unwrap();
        sac.save(&path).unwrap();
        let s = [0.1f32, 0.9, 0.3, 0.2];
        let mut loaded = Sac::load(
            SacConfig {
                seed: 99,
                ..SacConfig::default()
            },
            &path,
        )
        .unwrap();
        assert_eq!(sac.act(s, false).unwrap(), loaded.act(s, false).unwrap());
        let other = Sac::load(
            SacConfig {
                hidden: 8,
                ..SacConfig::default()
            },
            &path,
        );
        assert!(other.is_err(), "a model of another size must be refused");
        std::fs::write(&path, b"not a model").unwrap();
        assert!(Sac::load(SacConfig::default(), &path).is_err());
    }

    #[test]
    fn load_bytes_matches_the_file_and_refuses_bad_images() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.safetensors");
        let mut sac = Sac::new(SacConfig {
            seed: 7,
            ..SacConfig::default()
        })
        .unwrap();
        sac.save(&path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let mut from_bytes = Sac::load_bytes(SacConfig::default(), &bytes, "test").unwrap();
        let s = [0.3f32, 0.2, 0.7, 0.4];
        assert_eq!(
            sac.act(s, false).unwrap(),
            from_bytes.act(s, false).unwrap()
        );
        assert!(Sac::load_bytes(SacConfig::default(), b"not a model", "junk").is_err());
        let small = SacConfig {
            hidden: 8,
            ..SacConfig::default()
        };
        assert!(Sac::load_bytes(small, &bytes, "test").is_err());
    }

    #[test]
    fn a_loaded_agent_fine_tunes_only_after_its_warmup() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.safetensors");
        Sac::new(SacConfig::default()).unwrap().save(&path).unwrap();
        let cfg = SacConfig {
            online_warmup: 200,
            ..SacConfig::default()
        };
        let s = [0.5f32; STATE_DIM];
        let t = Transition {
            s,
            a: 0.1,
            r: 0.5,
            s2: s,
        };
        let mut fresh = Sac::new(cfg.clone()).unwrap();
        let mut loaded = Sac::load(cfg, &path).unwrap();
        for _ in 0..199 {
            fresh.observe(t.clone()).unwrap();
            loaded.observe(t.clone()).unwrap();
        }
        assert!(fresh.trained_rounds() >= 2, "a fresh agent trains at once");
        assert_eq!(loaded.trained_rounds(), 0);
        let before = loaded.act(s, false).unwrap();
        for _ in 0..50 {
            loaded.observe(t.clone()).unwrap();
        }
        assert_eq!(loaded.trained_rounds(), 1);
        assert_ne!(before, loaded.act(s, false).unwrap());
    }

    #[test]
    fn a_seed_gives_the_same_agent() {
        let s = [0.3f32, 0.2, 0.7, 0.4];
        let mut a = Sac::new(SacConfig::default()).unwrap();
        let mut b = Sac::new(SacConfig::default()).unwrap();
        let mut c = Sac::new(SacConfig {
            seed: 8,
            ..SacConfig::default()
        })
        .unwrap();
        let act = |x: &mut Sac| x.act(s, false).unwrap();
        assert_eq!(act(&mut a), act(&mut b));
        assert_ne!(act(&mut a), act(&mut c));
    }

    #[test]
    fn non_finite_transitions_are_not_stored() {
        let mut sac = Sac::new(SacConfig::default()).unwrap();
        let t = Transition {
            s: [f32::NAN, 0.0, 0.0, 0.0],
            a: 0.0,
            r: 1.0,
            s2: [0.0; STATE_DIM],
        };
        assert_eq!(sac.observe(t).unwrap(), None);
        assert_eq!(sac.buffered(), 0);
        assert!(sac.act([f32::NAN, 0.0, 0.0, 0.0], false).unwrap().is_nan());
    }
}
