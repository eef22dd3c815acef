-- Argo CD health of a warmstart endpoint (InferenceEndpointConfig or JumpStartModel), from status.state and the conditions.
--   Healthy:     DeploymentComplete (serving). If the weights cache missed maxDeployTimeInSeconds, the endpoint still
--                serves (slower cold starts, not a failure): that Degraded condition is shown in the message only.
--   Degraded:    DeploymentFailed / DeletionFailed (e.g. a gated model without acceptEula, a rollout past its deadline).
--   Progressing: no status yet, a spec generation not yet observed, DeploymentPending (waiting for the weights cache),
--                DeploymentInProgress (rolling out), Deletion*.
local hs = {}
local status = obj.status or {}

local function condition(kind)
  for _, c in ipairs(status.conditions or {}) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function cache_progress()
  local w = status.weightsCacheStatus
  if w ~= nil and w.targetNodes ~= nil and w.targetNodes > 0 then
    return string.format("weights cache %s on %d/%d nodes", w.state or "Pending", w.readyNodes or 0, w.targetNodes)
  end
  return nil
end

local function why(fallback)
  local ready = condition("Ready")
  if ready ~= nil and ready.message ~= nil and ready.message ~= "" then
    return ready.message
  end
  return fallback
end

local state = status.state
local generation = obj.metadata and obj.metadata.generation
if state == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to report status"
  return hs
end
if generation ~= nil and status.observedGeneration ~= nil and status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = string.format("Waiting for the operator to observe generation %d", generation)
  return hs
end

if state == "DeploymentComplete" then
  hs.status = "Healthy"
  hs.message = why("Serving")
  local degraded = condition("Degraded")
  if degraded ~= nil and degraded.status == "True" then
    hs.message = "Serving, degraded: " .. (degraded.message or degraded.reason or "")
  end
elseif state == "DeploymentFailed" or state == "DeletionFailed" then
  hs.status = "Degraded"
  hs.message = why(state)
elseif state == "DeploymentPending" then
  hs.status = "Progressing"
  hs.message = cache_progress() or why("Waiting for the weights cache")
elseif state == "DeploymentInProgress" then
  hs.status = "Progressing"
  local progressing = condition("Progressing")
  hs.message = (progressing and progressing.message) or why("Rolling out")
else
  hs.status = "Progressing"
  hs.message = state
end
return hs
