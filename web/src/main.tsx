import { StrictMode } from "react";
import { createRoot } from "react-dom/client";
import { App } from "./app/App";
import { adoptTokenFromLocation, watchOtherTabs } from "./auth/token";
import "./styles.css";
import { applyTheme, loadTheme } from "./ui/shell";

adoptTokenFromLocation();
window.addEventListener("hashchange", adoptTokenFromLocation); // a link followed within the page
watchOtherTabs();

applyTheme(loadTheme()); // before the first paint: no flash of the other theme
createRoot(document.getElementById("root")!).render(
  <StrictMode>
    <App />
  </StrictMode>,
);
