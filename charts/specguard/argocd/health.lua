-- Argo CD health check for specguard.io/SpeculativeDeployment.
--
-- Install it in argocd-cm under the key
--   resource.customizations.health.specguard.io_SpeculativeDeployment
-- (see charts/specguard/README.md). Argo CD passes the live object as `obj`.
--
--   Healthy      the operator acted on the current spec and the serving arm is ready
--   Progressing  no status yet, a new generation not acted on, a swap between the arms
--                (condition Swapping True; clients are served, Ready stays True), or pods
--                still starting
--   Degraded     halted (the flap limit stopped automatic changes: condition Halted True,
--                whose message says how to resume), rolled back (the drafter is off because
--                it made latency worse, or never became ready), the judge cannot judge
--                (JudgeDegraded: its sample source fails), or an invalid spec
--
-- A window without traffic (JudgeDegraded with reason NoSamples) is not Degraded: an idle
-- deployment is healthy; the message says that nothing was judged.
local hs = {}

local function condition(kind)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function say(c, fallback)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  if c ~= nil and c.reason ~= nil then
    return c.reason
  end
  return fallback
end

if obj.status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the specguard operator"
  return hs
end

local generation = obj.metadata and obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and (observed == nil or observed < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to act on generation " .. tostring(generation)
  return hs
end

local specValid = condition("SpecValid")
if specValid ~= nil and specValid.status == "False" then
  hs.status = "Degraded"
  hs.message = "Invalid spec: " .. say(specValid, "SpecValid is False")
  return hs
end

-- A swap is Progressing (clients are served throughout: Ready stays True). The Swapping
-- condition says so; a status written before it existed says it in arms and targetMode.
local swap = condition("Swapping")
local arms = obj.status.arms
local target = obj.status.targetMode
local swapping = (swap ~= nil and swap.status == "True")
if swap == nil then
  swapping = (arms ~= nil and arms.swapping == true)
    or (target ~= nil and obj.status.mode ~= nil and target ~= obj.status.mode)
end
if swapping then
  hs.status = "Progressing"
  if swap ~= nil then
    hs.message = "Swapping the arms: " .. say(swap, "Swapping")
  else
    hs.message = "Swapping the arms: " .. tostring(obj.status.mode) .. " -> " .. tostring(target)
  end
  return hs
end

local halted = condition("Halted")
if halted ~= nil and halted.status == "True" then
  hs.status = "Degraded"
  hs.message = "Halted: " .. say(halted, "FlapLimit")
  return hs
end

local rolledBack = condition("RolledBack")
if rolledBack ~= nil and rolledBack.status == "True" then
  hs.status = "Degraded"
  hs.message = "Rolled back to no drafter: " .. say(rolledBack, "RolledBack")
  return hs
end

local judge = condition("JudgeDegraded")
local idle = judge ~= nil and judge.status == "True" and judge.reason == "NoSamples"
if judge ~= nil and judge.status == "True" and not idle then
  hs.status = "Degraded"
  hs.message = "Judge degraded: " .. say(judge, "JudgeDegraded")
  return hs
end

local ready = condition("Ready")
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = say(ready, "Ready")
  if idle then
    hs.message = hs.message .. "; nothing judged: " .. say(judge, "no samples")
  end
  return hs
end

hs.status = "Progressing"
hs.message = say(ready, "Waiting for the serving pods to be ready")
return hs
