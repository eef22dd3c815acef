-- Argo CD health of a warmstart cache (ModelDataCacheConfig: weights on the nodes' NVMe; ModelImageCache: the
-- pre-pulled image), from status.state.
--   Healthy:     Ready (every target node holds the weights or the image).
--   Degraded:    Failed (e.g. InsufficientCapacity, AccessDenied, NotFound, ErrImagePull) and PartiallyReady (some
--                nodes ready, every other one failed: it will not finish without a fix).
--   Progressing: no status yet, Pending, Downloading, Deleting.
local hs = {}
local status = obj.status or {}
local state = status.state
local counts = string.format("%d/%d nodes ready", status.readyNodes or 0, status.targetNodes or 0)

local function detail()
  if status.message ~= nil and status.message ~= "" then
    return counts .. ": " .. status.message
  end
  return counts
end

if state == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to report status"
elseif state == "Ready" then
  hs.status = "Healthy"
  hs.message = detail()
elseif state == "Failed" or state == "PartiallyReady" then
  hs.status = "Degraded"
  hs.message = state .. ", " .. detail()
else
  hs.status = "Progressing"
  hs.message = state .. ", " .. detail()
end
return hs
